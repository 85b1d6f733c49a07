// Work sharing over TensorFlow's intra-op CPU pool in which the caller never waits for a
// helper that has not started.
//
// TF's own ParallelFor hands each shard to a pool thread and blocks until all of them ran.
// In a rollout, K workers share that pool: one worker's env step keeps the pool threads busy
// for milliseconds, so another worker's forward pass would sit behind it with its shards
// queued. Here the calling thread claims work from a shared counter too; helpers that start
// late find nothing left and leave.

#ifndef NEUROEVO_CUSTOM_OPS_COMMON_PARALLEL_FOR_H_
#define NEUROEVO_CUSTOM_OPS_COMMON_PARALLEL_FOR_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

namespace neuroevo {

// Runs fn(begin, end) over [0, count) in chunks of `chunk` indices, handed out one at a time
// from a shared counter to the calling thread and up to `pool->NumThreads() - 1` helpers
// scheduled on `pool` (a tsl::thread::ThreadPool). Returns once every chunk is done. `fn`
// must not throw.
template <typename Pool>
void ParallelForChunks(Pool* pool, int64_t count, int64_t chunk,
                       const std::function<void(int64_t, int64_t)>& fn) {
  if (count <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  const int64_t chunks = (count + chunk - 1) / chunk;
  const int64_t helpers = std::min<int64_t>(chunks, pool->NumThreads()) - 1;
  if (helpers <= 0) {
    fn(0, count);
    return;
  }
  // Shared with the helpers, which may outlive this call; `fn` is only called for a chunk
  // claimed before the last one is done, i.e. while the caller still waits.
  struct Shared {
    Shared(int64_t n, int64_t size, int64_t total, const std::function<void(int64_t, int64_t)>* f)
        : count(n), chunk(size), chunks(total), fn(f) {}
    const int64_t count;
    const int64_t chunk;
    const int64_t chunks;
    const std::function<void(int64_t, int64_t)>* const fn;
    std::atomic<int64_t> next{0};
    std::mutex mu;
    std::condition_variable all_done;
    int64_t done = 0;  // guarded by mu

    void Work() {
      int64_t n = 0;
      for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1), ++n) {
        (*fn)(c * chunk, std::min(count, (c + 1) * chunk));
      }
      if (n == 0) return;
      std::lock_guard<std::mutex> lock(mu);
      done += n;
      if (done == chunks) all_done.notify_all();
    }
  };
  auto shared = std::make_shared<Shared>(count, chunk, chunks, &fn);
  for (int64_t h = 0; h < helpers; ++h) pool->Schedule([shared] { shared->Work(); });
  shared->Work();
  std::unique_lock<std::mutex> lock(shared->mu);
  shared->all_done.wait(lock, [&] { return shared->done == shared->chunks; });
}

}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_COMMON_PARALLEL_FOR_H_
