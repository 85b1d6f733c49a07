// Work sharing over TensorFlow's intra-op CPU pool in which the caller never waits for a
// helper that has not started.
//
// TF's own ParallelFor hands each shard to a pool thread and blocks until all of them ran.
// In a rollout, K workers share that pool: one worker's env step keeps the pool threads busy
// for milliseconds, so another worker's forward pass would sit behind it with its shards
// queued. Here the calling thread claims work from a shared counter too; helpers that start
// late find nothing left and leave. An optional gate lets helpers stay away while the cores
// are known to be busy with other callers' work (see ParallelForChunks).

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
//
// `helpers_welcome`, when given, is asked before scheduling helpers and by each helper after
// each chunk it did: while it says no, the calling thread does the work alone. A helper
// that shares a core with another caller's thread slows both, and the caller then waits for
// the helper's chunk until the scheduler lets it finish.
template <typename Pool>
void ParallelForChunks(Pool* pool, int64_t count, int64_t chunk,
                       const std::function<void(int64_t, int64_t)>& fn,
                       const std::function<bool()>& helpers_welcome = nullptr) {
  if (count <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  const int64_t chunks = (count + chunk - 1) / chunk;
  const int64_t helpers = std::min<int64_t>(chunks, pool->NumThreads()) - 1;
  if (helpers <= 0 || (helpers_welcome && !helpers_welcome())) {
    fn(0, count);
    return;
  }
  // Shared with the helpers, which may outlive this call; `fn` is only called for a chunk
  // claimed before the last one is done, i.e. while the caller still waits.
  struct Shared {
    Shared(int64_t n, int64_t size, int64_t total, const std::function<void(int64_t, int64_t)>* f,
           const std::function<bool()>* welcome)
        : count(n), chunk(size), chunks(total), fn(f), welcome(welcome) {}
    const int64_t count;
    const int64_t chunk;
    const int64_t chunks;
    const std::function<void(int64_t, int64_t)>* const fn;
    const std::function<bool()>* const welcome;  // null: helpers always welcome
    std::atomic<int64_t> next{0};
    std::mutex mu;
    std::condition_variable all_done;
    int64_t done = 0;  // guarded by mu

    // `helper`: a pool thread, which leaves once `welcome` says no; the caller never does.
    // `welcome` is asked only after a chunk and before it is counted as done, i.e. while the
    // caller still waits and the function it points to exists.
    void Work(bool helper) {
      int64_t n = 0;
      for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
        (*fn)(c * chunk, std::min(count, (c + 1) * chunk));
        ++n;
        if (helper && welcome != nullptr && !(*welcome)()) break;
      }
      if (n == 0) return;
      std::lock_guard<std::mutex> lock(mu);
      done += n;
      if (done == chunks) all_done.notify_all();
    }
  };
  auto shared = std::make_shared<Shared>(count, chunk, chunks, &fn,
                                         helpers_welcome ? &helpers_welcome : nullptr);
  for (int64_t h = 0; h < helpers; ++h) pool->Schedule([shared] { shared->Work(true); });
  shared->Work(false);
  std::unique_lock<std::mutex> lock(shared->mu);
  shared->all_done.wait(lock, [&] { return shared->done == shared->chunks; });
}

}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_COMMON_PARALLEL_FOR_H_
