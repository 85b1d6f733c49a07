// TensorFlow ops the in-graph rollout needs besides the envs and the model: the noise table as
// a resource, genome materialisation from it, and an atomic counter that hands out queue items.
//
// * `NeuroevoNoiseTableMap` memory-maps a cached noise table file (read-only, shared pages: no
//   copy per worker or per process); `NeuroevoNoiseTableFromTensor` copies an in-memory one.
// * `NeuroevoMaterialize` builds weight rows w = base[b] + sum_k (c_k * noise[i_k : i_k + P])
//   (.) s_{j_k} for a list of genomes described by a plan (bases, scale rows, terms). The float32
//   operations are those of neuroevo.genomes.genome.GenomeDecoder, in the same order, so the
//   rows are bit-identical to the host decoder's; this library is compiled with
//   -ffp-contract=off (see neuroevo/ops/build.py) so that no multiply-add is fused.
// * `NeuroevoClaimCounter*`: K rollout loops running concurrently claim the next `count` items
//   of one evaluation with a single atomic fetch-add (dynamic load balancing, race-free).
// Python side: neuroevo/evaluation/materialize.py and neuroevo/evaluation/rollout.py.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_base.h"
#include "tensorflow/core/framework/resource_handle.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/util/work_sharder.h"

#include "common/resource_handle.h"
#include "common/tf_names.h"

namespace neuroevo {
namespace rollout {
namespace {

// ----------------------------------------------------------------------------- noise table

// float32 values, either a read-only shared mapping of a file or an owned copy.
class NoiseTable : public tensorflow::ResourceBase {
 public:
  explicit NoiseTable(std::vector<float> values)
      : owned_(std::move(values)), data_(owned_.data()), size_(owned_.size()) {}

  NoiseTable(void* map, size_t map_bytes, int64_t offset, int64_t size, std::string path)
      : map_(map),
        map_bytes_(map_bytes),
        data_(reinterpret_cast<const float*>(static_cast<const char*>(map) + offset)),
        size_(size),
        path_(std::move(path)) {}

  ~NoiseTable() override {
    if (map_ != nullptr) munmap(map_, map_bytes_);
  }

  NoiseTable(const NoiseTable&) = delete;
  NoiseTable& operator=(const NoiseTable&) = delete;

  const float* data() const { return data_; }
  int64_t size() const { return size_; }

  std::string DebugString() const override {
    return path_.empty() ? absl::StrCat("noise table of ", size_, " floats in memory")
                         : absl::StrCat("noise table of ", size_, " floats mapped from ", path_);
  }

 private:
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::vector<float> owned_;
  const float* data_;
  int64_t size_;
  std::string path_;
};

NEUROEVO_REGISTER_MAKE_OP("NeuroevoNoiseTableMap")
    .Input("path: string")
    .Input("offset: int64")
    .Input("size: int64")
    .Doc(R"doc(
Maps `size` float32 values starting `offset` bytes into the file at `path` (a cached noise
table, neuroevo.genomes.noise) read-only and shared: every process mapping it shares the same pages.
)doc");

class NoiseTableMapOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& path_t = ctx->input(0);
    const Tensor& offset_t = ctx->input(1);
    const Tensor& size_t_ = ctx->input(2);
    OP_REQUIRES(ctx, path_t.dims() == 0 && offset_t.dims() == 0 && size_t_.dims() == 0,
                absl::InvalidArgumentError("path, offset and size must be scalars"));
    const std::string path(path_t.scalar<tensorflow::tstring>()());
    const int64_t offset = offset_t.scalar<int64_t>()();
    const int64_t size = size_t_.scalar<int64_t>()();
    OP_REQUIRES(ctx, offset >= 0 && offset % 4 == 0,
                absl::InvalidArgumentError(absl::StrCat(
                    "offset must be a non-negative multiple of 4 bytes, got ", offset)));
    OP_REQUIRES(ctx, size >= 1,
                absl::InvalidArgumentError(absl::StrCat("size must be >= 1, got ", size)));
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    OP_REQUIRES(ctx, fd >= 0,
                absl::InvalidArgumentError(absl::StrCat("cannot open the noise table ", path,
                                                        ": ", std::strerror(errno))));
    struct stat info;
    const bool stat_ok = fstat(fd, &info) == 0;
    const int64_t needed = offset + 4 * size;
    if (!stat_ok || info.st_size < needed) {
      close(fd);
      OP_REQUIRES(ctx, false,
                  absl::InvalidArgumentError(absl::StrCat(
                      "the noise table file ", path, " holds ", stat_ok ? info.st_size : -1,
                      " bytes, fewer than the ", needed, " needed for ", size,
                      " floats at offset ", offset, "; delete it to have it regenerated")));
    }
    void* map = mmap(nullptr, needed, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    OP_REQUIRES(ctx, map != MAP_FAILED,
                absl::ResourceExhaustedError(absl::StrCat("cannot map the noise table ", path,
                                                          ": ", std::strerror(errno))));
    OP_REQUIRES_OK(ctx, OutputHandle(ctx, new NoiseTable(map, needed, offset, size, path)));
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoNoiseTableMap").Device(DEVICE_CPU), NoiseTableMapOp);

NEUROEVO_REGISTER_MAKE_OP("NeuroevoNoiseTableFromTensor")
    .Input("values: float")
    .Doc(R"doc(
A noise table holding a copy of the float32 vector `values` (an in-memory table).
)doc");

class NoiseTableFromTensorOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& values = ctx->input(0);
    OP_REQUIRES(ctx, values.dims() == 1 && values.NumElements() >= 1,
                absl::InvalidArgumentError(absl::StrCat(
                    "values must be a non-empty vector, got shape ",
                    values.shape().DebugString())));
    auto flat = values.flat<float>();
    std::vector<float> copy(flat.data(), flat.data() + flat.size());
    OP_REQUIRES_OK(ctx, OutputHandle(ctx, new NoiseTable(std::move(copy))));
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoNoiseTableFromTensor").Device(DEVICE_CPU),
                        NoiseTableFromTensorOp);

// ------------------------------------------------------------------------------ materialise

REGISTER_OP("NeuroevoMaterialize")
    .Input("table: resource")
    .Input("bases: float")
    .Input("scales: float")
    .Input("base_index: int32")
    .Input("term_offsets: int64")
    .Input("term_coef: float")
    .Input("term_scale: int32")
    .Input("term_noise: int64")
    .Input("genomes: int32")
    .Output("weights: float")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle bases, genomes;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &bases));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(8), 1, &genomes));
      c->set_output(0, c->Matrix(c->Dim(genomes, 0), c->Dim(bases, 1)));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Weights float32 [len(genomes), P] of the listed genomes of a plan. Genome g has base row
base_index[g] of bases [B, P] (-1: none) and the terms term_offsets[g] .. term_offsets[g + 1] - 1
of the flat term arrays; term k adds (term_coef[k] * noise[term_noise[k] : term_noise[k] + P]) *
scales[term_scale[k]] (term_scale -1: no scale). Without a base the first
term is the row; without base and terms the row is zeros. Each step is one float32 rounding,
in this order, as in neuroevo.genomes.genome.GenomeDecoder.
)doc");

class MaterializeOp : public ResourceOp<NoiseTable> {
 public:
  using ResourceOp::ResourceOp;

 protected:
  void Compute(OpKernelContext* ctx, NoiseTable& table) override {
    const Tensor& bases = ctx->input(1);
    const Tensor& scales = ctx->input(2);
    const Tensor& base_index = ctx->input(3);
    const Tensor& offsets = ctx->input(4);
    const Tensor& coef = ctx->input(5);
    const Tensor& scale_index = ctx->input(6);
    const Tensor& noise_index = ctx->input(7);
    const Tensor& genomes = ctx->input(8);
    OP_REQUIRES(ctx, bases.dims() == 2 && scales.dims() == 2,
                absl::InvalidArgumentError(absl::StrCat(
                    "bases and scales must be matrices [rows, P], got ",
                    bases.shape().DebugString(), " and ", scales.shape().DebugString())));
    const int64_t params = bases.dim_size(1);
    OP_REQUIRES(ctx, scales.dim_size(1) == params && params >= 1,
                absl::InvalidArgumentError(absl::StrCat(
                    "bases and scales must have the same P >= 1 columns, got ",
                    bases.shape().DebugString(), " and ", scales.shape().DebugString())));
    OP_REQUIRES(ctx,
                base_index.dims() == 1 && offsets.dims() == 1 && coef.dims() == 1 &&
                    scale_index.dims() == 1 && noise_index.dims() == 1 && genomes.dims() == 1,
                absl::InvalidArgumentError("base_index, term arrays and genomes must be vectors"));
    const int64_t num_genomes = base_index.dim_size(0);
    const int64_t num_terms = coef.dim_size(0);
    OP_REQUIRES(ctx, offsets.dim_size(0) == num_genomes + 1,
                absl::InvalidArgumentError(absl::StrCat(
                    "term_offsets must have len(base_index) + 1 = ", num_genomes + 1,
                    " entries, got ", offsets.dim_size(0))));
    OP_REQUIRES(ctx,
                scale_index.dim_size(0) == num_terms && noise_index.dim_size(0) == num_terms,
                absl::InvalidArgumentError(absl::StrCat(
                    "term_coef, term_scale and term_noise must have one length, got ",
                    num_terms, ", ", scale_index.dim_size(0), ", ", noise_index.dim_size(0))));
    const auto base_k = base_index.flat<int32_t>();
    const auto offsets_k = offsets.flat<int64_t>();
    const auto coef_k = coef.flat<float>();
    const auto scale_k = scale_index.flat<int32_t>();
    const auto noise_k = noise_index.flat<int64_t>();
    const auto genomes_k = genomes.flat<int32_t>();
    const int64_t count = genomes.dim_size(0);
    const int64_t num_bases = bases.dim_size(0);
    const int64_t num_scales = scales.dim_size(0);
    const int64_t last_start = table.size() - params;
    for (int64_t r = 0; r < count; ++r) {
      const int32_t g = genomes_k(r);
      OP_REQUIRES(ctx, g >= 0 && g < num_genomes,
                  absl::InvalidArgumentError(absl::StrCat("genomes[", r, "] = ", g,
                                                          " is outside [0, ", num_genomes, ")")));
      const int32_t b = base_k(g);
      OP_REQUIRES(ctx, b >= -1 && b < num_bases,
                  absl::InvalidArgumentError(absl::StrCat("base_index[", g, "] = ", b,
                                                          " is outside [-1, ", num_bases, ")")));
      const int64_t first = offsets_k(g), end = offsets_k(g + 1);
      OP_REQUIRES(ctx, 0 <= first && first <= end && end <= num_terms,
                  absl::InvalidArgumentError(absl::StrCat(
                      "term_offsets[", g, "..", g + 1, "] = ", first, "..", end,
                      " is no range inside the ", num_terms, " terms")));
      for (int64_t k = first; k < end; ++k) {
        OP_REQUIRES(ctx, scale_k(k) >= -1 && scale_k(k) < num_scales,
                    absl::InvalidArgumentError(absl::StrCat("term_scale[", k, "] = ", scale_k(k),
                                                            " is outside [-1, ", num_scales,
                                                            ")")));
        OP_REQUIRES(ctx, noise_k(k) >= 0 && noise_k(k) <= last_start,
                    absl::InvalidArgumentError(absl::StrCat(
                        "term_noise[", k, "] = ", noise_k(k), ": the slice of ", params,
                        " values is outside the noise table of ", table.size())));
      }
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({count, params}), &out));
    if (count == 0) return;
    float* out_data = out->flat<float>().data();
    const float* base_data = bases.flat<float>().data();
    const float* scale_data = scales.flat<float>().data();
    const float* noise = table.data();
    constexpr int64_t kBlock = 1 << 14;
    const int64_t blocks = (params + kBlock - 1) / kBlock;
    auto work = [&](int64_t unit_begin, int64_t unit_end) {
      for (int64_t unit = unit_begin; unit < unit_end; ++unit) {
        const int64_t r = unit / blocks;
        const int64_t begin = (unit % blocks) * kBlock;
        const int64_t n = std::min(kBlock, params - begin);
        const int32_t g = genomes_k(r);
        float* row = out_data + r * params + begin;
        int64_t k = offsets_k(g);
        const int64_t end = offsets_k(g + 1);
        if (base_k(g) >= 0) {
          std::memcpy(row, base_data + base_k(g) * params + begin, n * sizeof(float));
        } else if (k == end) {
          std::fill(row, row + n, 0.0f);
        } else {
          Term(row, n, noise + noise_k(k) + begin, ScaleRow(scale_data, scale_k(k), params, begin),
               coef_k(k), /*add=*/false);
          ++k;
        }
        for (; k < end; ++k) {
          Term(row, n, noise + noise_k(k) + begin, ScaleRow(scale_data, scale_k(k), params, begin),
               coef_k(k), /*add=*/true);
        }
      }
    };
    const auto& workers = *ctx->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(workers.num_threads, workers.workers, count * blocks,
                      /*cost_per_unit=*/std::min(kBlock, params) * 4, work);
  }

 private:
  static const float* ScaleRow(const float* scales, int32_t index, int64_t params,
                               int64_t begin) {
    return index < 0 ? nullptr : scales + index * params + begin;
  }

  // row (=|+=) (coef * noise) * scale: each product and the sum rounded to float32 on its own,
  // the decoder's order (a GA chain's first term has coef 1, so it is exactly noise * scale).
  static void Term(float* row, int64_t n, const float* noise, const float* scale, float coef,
                   bool add) {
    if (scale != nullptr) {
      if (add) {
        for (int64_t i = 0; i < n; ++i) row[i] = row[i] + (coef * noise[i]) * scale[i];
      } else {
        for (int64_t i = 0; i < n; ++i) row[i] = (coef * noise[i]) * scale[i];
      }
    } else if (add) {
      for (int64_t i = 0; i < n; ++i) row[i] = row[i] + coef * noise[i];
    } else {
      for (int64_t i = 0; i < n; ++i) row[i] = coef * noise[i];
    }
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoMaterialize").Device(DEVICE_CPU), MaterializeOp);

// --------------------------------------------------------------------------- claim counter

// The next unclaimed item of an evaluation's queue, and how many items it holds.
class ClaimCounter : public tensorflow::ResourceBase {
 public:
  std::string DebugString() const override {
    return absl::StrCat("claim counter at ", next.load(), " of ", limit.load());
  }

  std::atomic<int64_t> next{0};
  std::atomic<int64_t> limit{0};
};

// Reads input `input`, an int64 scalar >= 0 called `name` in messages.
absl::Status ReadCount(OpKernelContext* ctx, int input, const char* name, int64_t* out) {
  const Tensor& t = ctx->input(input);
  if (t.dims() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be a scalar, got shape ", t.shape().DebugString()));
  }
  *out = t.scalar<int64_t>()();
  if (*out < 0) return absl::InvalidArgumentError(absl::StrCat(name, " must be >= 0, got ", *out));
  return absl::OkStatus();
}

NEUROEVO_REGISTER_MAKE_OP("NeuroevoClaimCounterMake")
    .Doc("A counter handing out item ids of a queue (empty until NeuroevoClaimCounterReset).");

class ClaimCounterMakeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, OutputHandle(ctx, new ClaimCounter()));
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoClaimCounterMake").Device(DEVICE_CPU), ClaimCounterMakeOp);

REGISTER_OP("NeuroevoClaimCounterReset")
    .Input("handle: resource")
    .Input("limit: int64")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc("Starts a new queue of items 0 .. limit - 1; no claim may run meanwhile.");

class ClaimCounterResetOp : public ResourceOp<ClaimCounter> {
 public:
  using ResourceOp::ResourceOp;

 protected:
  void Compute(OpKernelContext* ctx, ClaimCounter& counter) override {
    int64_t limit = 0;
    OP_REQUIRES_OK(ctx, ReadCount(ctx, 1, "limit", &limit));
    counter.limit.store(limit);
    counter.next.store(0);
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoClaimCounterReset").Device(DEVICE_CPU),
                        ClaimCounterResetOp);

REGISTER_OP("NeuroevoClaim")
    .Input("handle: resource")
    .Input("count: int64")
    .Output("first: int64")
    .Output("end: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      c->set_output(1, c->Scalar());
      return absl::OkStatus();
    })
    .Doc(R"doc(
Claims the next `count` (>= 0) items atomically: items first .. end - 1, fewer than `count`
(possibly none) once the queue runs out. Concurrent claims never share an item.
)doc");

class ClaimOp : public ResourceOp<ClaimCounter> {
 public:
  using ResourceOp::ResourceOp;

 protected:
  void Compute(OpKernelContext* ctx, ClaimCounter& counter) override {
    int64_t count = 0;
    OP_REQUIRES_OK(ctx, ReadCount(ctx, 1, "count", &count));
    const int64_t limit = counter.limit.load();
    int64_t first = counter.next.load();
    // Never move past the limit, so repeated claims on an empty queue cannot overflow.
    while (first < limit &&
           !counter.next.compare_exchange_weak(first, std::min(first + count, limit))) {
    }
    first = std::min(first, limit);
    Tensor* first_out = nullptr;
    Tensor* end_out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &first_out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &end_out));
    first_out->scalar<int64_t>()() = first;
    end_out->scalar<int64_t>()() = std::min(first + count, limit);
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoClaim").Device(DEVICE_CPU), ClaimOp);

}  // namespace
}  // namespace rollout
}  // namespace neuroevo
