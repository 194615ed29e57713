#include "dist/MpiCommunicator.h"

#include <algorithm>
#include <climits>

#include <ATen/Functions.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "common/Log.h"
#include "common/Strings.h"
#include "dist/FaultInjection.h"
#include "dist/MpiCheck.h"
#include "dist/Watchdog.h"

namespace mb::dist {
namespace {

// --- 2-byte float reductions ----------------------------------------------------
// MPI has no bf16/fp16 types: they travel as MPI_UINT16_T with these user operators, which
// widen each element to float, combine, and round back (what NCCL does for bf16 too).

template <class T, class Combine>
void combine16(void* in, void* inout, int* len, Combine fn) {
  auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = T(fn(static_cast<float>(a[i]), static_cast<float>(b[i])));
}

template <class T>
void sum16(void* in, void* inout, int* len, MPI_Datatype*) {
  combine16<T>(in, inout, len, [](float x, float y) { return x + y; });
}
template <class T>
void max16(void* in, void* inout, int* len, MPI_Datatype*) {
  combine16<T>(in, inout, len, [](float x, float y) { return std::max(x, y); });
}
template <class T>
void min16(void* in, void* inout, int* len, MPI_Datatype*) {
  combine16<T>(in, inout, len, [](float x, float y) { return std::min(x, y); });
}

struct Float16Ops {
  MPI_Op bf16Sum, bf16Max, bf16Min, halfSum, halfMax, halfMin;
};

const Float16Ops& float16Ops() {
  // Created once, after MPI_Init, on the worker thread; freed by MPI_Finalize.
  static const Float16Ops ops = [] {
    Float16Ops o{};
    MB_MPI_CHECK(MPI_Op_create(&sum16<c10::BFloat16>, 1, &o.bf16Sum));
    MB_MPI_CHECK(MPI_Op_create(&max16<c10::BFloat16>, 1, &o.bf16Max));
    MB_MPI_CHECK(MPI_Op_create(&min16<c10::BFloat16>, 1, &o.bf16Min));
    MB_MPI_CHECK(MPI_Op_create(&sum16<c10::Half>, 1, &o.halfSum));
    MB_MPI_CHECK(MPI_Op_create(&max16<c10::Half>, 1, &o.halfMax));
    MB_MPI_CHECK(MPI_Op_create(&min16<c10::Half>, 1, &o.halfMin));
    return o;
  }();
  return ops;
}

MPI_Datatype mpiType(at::ScalarType type, const std::string& label) {
  switch (type) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kInt:
      return MPI_INT32_T;
    case at::kLong:
      return MPI_INT64_T;
    case at::kByte:
      return MPI_UINT8_T;
    case at::kChar:
      return MPI_INT8_T;
    case at::kBFloat16:
    case at::kHalf:
      return MPI_UINT16_T;
    default:
      throw RuntimeError(label + ": the MPI backend cannot reduce dtype " +
                         std::string(c10::toString(type)));
  }
}

MPI_Op mpiOp(ReduceOp op, at::ScalarType type) {
  bool avgOrSum = op == ReduceOp::kSum || op == ReduceOp::kAvg;
  if (type == at::kBFloat16) {
    const auto& o = float16Ops();
    return avgOrSum ? o.bf16Sum : op == ReduceOp::kMax ? o.bf16Max : o.bf16Min;
  }
  if (type == at::kHalf) {
    const auto& o = float16Ops();
    return avgOrSum ? o.halfSum : op == ReduceOp::kMax ? o.halfMax : o.halfMin;
  }
  return avgOrSum ? MPI_SUM : op == ReduceOp::kMax ? MPI_MAX : MPI_MIN;
}

// MPI counts are ints: split larger messages into chunks of at most kMaxCount elements.
constexpr std::int64_t kMaxCount = std::int64_t{1} << 30;

template <class Fn>
void forEachChunk(std::int64_t count, std::int64_t elementSize, char* base, Fn fn) {
  for (std::int64_t offset = 0; offset < count; offset += kMaxCount) {
    int chunk = static_cast<int>(std::min(kMaxCount, count - offset));
    fn(base + offset * elementSize, chunk);
  }
}

std::string describe(const std::string& label, const at::Tensor& t) {
  return label + " (" + str::humanBytes(static_cast<double>(t.numel() * t.element_size())) + ", " +
         c10::toString(t.scalar_type()) + ")";
}

void requireContiguous(const at::Tensor& tensor, const std::string& label) {
  if (!tensor.is_contiguous())
    throw RuntimeError(label + ": collectives need contiguous tensors (internal error)");
}

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_future<void> done, at::Tensor staged, at::Tensor target)
      : done_(std::move(done)), staged_(std::move(staged)), target_(std::move(target)) {}
  void wait() override {
    done_.get();
    if (staged_.defined()) {
      target_.copy_(staged_);  // CUDA tensor: bring the reduced host copy back
      staged_.reset();
    }
  }

 private:
  std::shared_future<void> done_;
  at::Tensor staged_;
  at::Tensor target_;
};

at::Tensor stageOnHost(const at::Tensor& tensor) {
  at::Tensor host =
      at::empty(tensor.sizes(), tensor.options().device(at::kCPU).pinned_memory(true));
  host.copy_(tensor);
  return host;
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) {
  MB_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  // Errors come back as codes (and become typed exceptions) instead of aborting inside MPI.
  MB_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MB_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MB_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  worker_ = std::thread([this] { workerLoop(); });
}

MpiCommunicator::~MpiCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  if (worker_.joinable()) worker_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::shared_future<void> MpiCommunicator::enqueue(const std::string& label,
                                                  std::function<void()> body) {
  auto task = std::make_unique<Task>();
  task->label = label;
  task->body = std::move(body);
  std::shared_future<void> done = task->done.get_future().share();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  ready_.notify_one();
  return done;
}

void MpiCommunicator::workerLoop() {
  while (true) {
    std::unique_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping with nothing left to do
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      maybeInjectHang(rank_, task->label);  // a rank stuck before it enters the collective
      Watchdog::Scope scope = Watchdog::instance().track(task->label);
      task->body();
      task->done.set_value();
    } catch (...) {
      task->done.set_exception(std::current_exception());
    }
  }
}

std::shared_ptr<Work> MpiCommunicator::allReduceAsync(at::Tensor tensor, ReduceOp op,
                                                      const std::string& label) {
  requireContiguous(tensor, label);
  at::Tensor target = tensor;
  at::Tensor host = tensor.is_cuda() ? stageOnHost(tensor) : tensor;
  MPI_Datatype type = mpiType(host.scalar_type(), label);
  auto body = [this, host, op, type] {
    if (size_ > 1) {
      MPI_Op mop = mpiOp(op, host.scalar_type());
      forEachChunk(host.numel(), host.element_size(), static_cast<char*>(host.data_ptr()),
                   [&](char* data, int count) {
                     MB_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, count, type, mop, comm_));
                   });
    }
    if (op == ReduceOp::kAvg && size_ > 1) {
      if (at::isFloatingType(host.scalar_type())) {
        host.div_(size_);
      } else {
        host.div_(size_, "floor");
      }
    }
  };
  auto done = enqueue(describe(label, tensor), body);
  return std::make_shared<MpiWork>(done, tensor.is_cuda() ? host : at::Tensor(), target);
}

void MpiCommunicator::broadcast(at::Tensor tensor, int root, const std::string& label) {
  requireContiguous(tensor, label);
  at::Tensor host = tensor.is_cuda() ? stageOnHost(tensor) : tensor;
  auto body = [this, host, root] {
    forEachChunk(host.numel() * host.element_size(), 1, static_cast<char*>(host.data_ptr()),
                 [&](char* data, int count) {
                   MB_MPI_CHECK(MPI_Bcast(data, count, MPI_BYTE, root, comm_));
                 });
  };
  enqueue(describe(label, tensor), body).get();
  if (tensor.is_cuda()) tensor.copy_(host);
}

at::Tensor MpiCommunicator::allGather(const at::Tensor& tensor, const std::string& label) {
  at::Tensor input = tensor.is_cuda() ? stageOnHost(tensor.contiguous()) : tensor.contiguous();
  std::vector<int64_t> shape{size_};
  shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
  at::Tensor output = at::empty(shape, input.options());
  std::int64_t bytes = input.numel() * input.element_size();
  if (bytes > INT_MAX) throw RuntimeError(label + ": allGather of more than 2 GiB per rank");
  auto body = [this, input, output, bytes] {
    MB_MPI_CHECK(MPI_Allgather(input.data_ptr(), static_cast<int>(bytes), MPI_BYTE,
                               output.data_ptr(), static_cast<int>(bytes), MPI_BYTE, comm_));
  };
  enqueue(describe(label, input), body).get();
  return tensor.is_cuda() ? output.to(tensor.device()) : output;
}

void MpiCommunicator::barrier(const std::string& label) {
  enqueue(label, [this] { MB_MPI_CHECK(MPI_Barrier(comm_)); }).get();
}

}  // namespace mb::dist
