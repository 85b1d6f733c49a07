"""Writing RGB frames to a video file with the ffmpeg binary that ``imageio-ffmpeg`` ships.

imageio's own writer does not look at ffmpeg's exit status when it closes: a disk that fills
up near the end leaves a truncated file and no error. :class:`VideoFile` pipes raw frames to
ffmpeg itself (H.264, yuv420p, as imageio does) and checks the status, so any failure is one
``VideoError`` and the partial file is removed.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

import numpy as np

__all__ = ["VIDEO_SUFFIXES", "VideoError", "VideoFile"]

VIDEO_SUFFIXES = (".mp4", ".mkv", ".mov", ".avi")
"""Containers that take the H.264 stream written here."""


class VideoError(ValueError):
    """The video could not be written (a full or read-only disk, ffmpeg failed)."""


class VideoFile:
    """A video being written to ``path`` at ``fps`` frames per second; use as a context
    manager and :meth:`append` uint8 ``[height, width, 3]`` frames of one size.

    Raises:
        VideoError: from :meth:`append` or on leaving the context when ffmpeg fails; the
            partial file is removed.
    """

    def __init__(self, path: Path, fps: int):
        self.path = Path(path)
        self.fps = fps
        self._process: subprocess.Popen | None = None
        self._log: tempfile._TemporaryFileWrapper | None = None

    def _start(self, height: int, width: int) -> subprocess.Popen:
        import imageio_ffmpeg

        command = [
            imageio_ffmpeg.get_ffmpeg_exe(),
            "-y",
            "-v",
            "error",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "rgb24",
            "-s",
            f"{width}x{height}",
            "-r",
            str(self.fps),
            "-i",
            "-",
            "-an",
            "-vcodec",
            "libx264",
            "-pix_fmt",
            "yuv420p",
            str(self.path),
        ]
        # stderr to a file, not a pipe: a pipe nobody reads could fill up and stall ffmpeg.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed when ffmpeg ends)
        return subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._log
        )

    def append(self, frame: np.ndarray) -> None:
        """Adds one uint8 RGB frame."""
        frame = np.ascontiguousarray(frame, np.uint8)
        if self._process is None:
            self._process = self._start(*frame.shape[:2])
        try:
            self._process.stdin.write(frame.tobytes())
        except OSError:  # ffmpeg quit (its reason is on its stderr): report it on close
            self._finish(failed=True)

    def _finish(self, failed: bool = False) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.stdin.close()
        except OSError:
            failed = True
        status = process.wait()
        self._log.seek(0)
        errors = self._log.read().decode(errors="replace").strip()
        self._log.close()
        if status != 0 or failed:
            self.path.unlink(missing_ok=True)
            reason = (errors.splitlines() or [f"ffmpeg exit status {status}"])[-1]
            raise VideoError(
                f"cannot write the video {self.path} ({reason}); is its disk full or read-only?"
            )

    def __enter__(self) -> VideoFile:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None:
            self._finish()
            return
        if self._process is not None:  # an error elsewhere: drop the partial video
            self._process.kill()
            self._process.wait()
            self._process = None
            self._log.close()
            self.path.unlink(missing_ok=True)
