// NCCL backend: see NcclCommunicator.h for the stream contract. This file needs only
// cuda_runtime.h, nccl.h and CPU ATen headers (the current stream and recordStream come from
// CudaStreamsCuda.cpp), so CPU builds with a CUDA toolkit compile it as a check.
#include "dist/NcclCommunicator.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include <cuda_runtime.h>
#include <nccl.h>

#include <ATen/Functions.h>

#include "common/Check.h"
#include "common/Environment.h"
#include "common/Log.h"
#include "common/Strings.h"
#include "dist/Agreement.h"
#include "dist/CudaStreams.h"
#include "dist/FaultInjection.h"
#include "dist/Watchdog.h"

// bf16 and ncclAvg need 2.10; MB_NCCL_CHECK uses ncclGetLastError (2.13) and ncclInProgress
// (2.14, the NCCL of PyTorch 2.0).
#if NCCL_VERSION_CODE < 21400
#error "megabatch needs NCCL 2.14 or newer"
#endif

namespace mb::dist {
namespace {

ncclDataType_t ncclType(at::ScalarType type, const std::string& label) {
  switch (type) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kByte:
      return ncclUint8;
    case at::kChar:
      return ncclInt8;
    default:
      throw RuntimeError(label + ": the NCCL backend cannot reduce dtype " +
                         std::string(c10::toString(type)));
  }
}

ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

std::string describe(const std::string& label, const at::Tensor& t) {
  return label + " (" + str::humanBytes(static_cast<double>(t.numel() * t.element_size())) + ", " +
         c10::toString(t.scalar_type()) + ")";
}

// Makes `device` current for a scope and restores the previous device after it.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    MB_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) MB_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// A CUDA event that several owners (a Work, the monitor) can hold.
class Event {
 public:
  Event() { MB_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~Event() { cudaEventDestroy(event_); }  // deferred by CUDA until the event completes
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class NcclWork final : public Work {
 public:
  NcclWork(int device, std::shared_ptr<Event> done, at::Tensor tensor, int floorDivisor)
      : device_(device),
        done_(std::move(done)),
        tensor_(std::move(tensor)),
        floorDivisor_(floorDivisor) {}

  // The caller's current stream waits for the collective; the host does not.
  void wait() override {
    if (!done_) return;
    DeviceGuard guard(device_);
    MB_CUDA_CHECK(cudaStreamWaitEvent(cuda::currentStream(device_), done_->get(), 0));
    if (floorDivisor_ > 1) tensor_.div_(floorDivisor_, "floor");  // integer average, on that stream
    done_.reset();
    tensor_.reset();
  }

 private:
  int device_;
  std::shared_ptr<Event> done_;
  at::Tensor tensor_;
  int floorDivisor_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const ncclUniqueId& id, int rank, int size, int device);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backendName() const override { return "nccl"; }

  std::shared_ptr<Work> allReduceAsync(at::Tensor tensor, ReduceOp op,
                                       const std::string& label) override;
  void broadcast(at::Tensor tensor, int root, const std::string& label) override;
  at::Tensor allGather(const at::Tensor& tensor, const std::string& label) override;
  void barrier(const std::string& label) override;
  void abort() noexcept override;

 private:
  struct InFlight {
    std::shared_ptr<Event> done;
    Watchdog::Scope scope;  // open until `done` fires: the watchdog times the collective
  };

  void stopMonitor() noexcept;
  void releaseNccl() noexcept;  // Note [NCCL teardown]
  void endComm() noexcept;
  void requireDeviceTensor(const at::Tensor& tensor, const std::string& label) const;
  // Orders the communicator's stream after the caller's current stream, runs `enqueue` (the
  // NCCL call) on it, and returns the completion event. Callers hold mutex_.
  template <class Enqueue>
  std::shared_ptr<Event> run(const at::Tensor& tensor, const std::string& what, Enqueue enqueue);
  void monitorLoop();

  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<Event> ready_;  // recorded on the caller's stream before each collective
  std::atomic<bool> aborted_{false};

  std::mutex mutex_;  // serialises enqueueing (hooks may run on several autograd threads)
  std::condition_variable wake_;
  std::deque<InFlight> inFlight_;  // completion order = enqueue order (one stream)
  bool stopping_ = false;
  std::thread monitor_;
};

NcclCommunicator::NcclCommunicator(const ncclUniqueId& id, int rank, int size, int device)
    : rank_(rank), size_(size), device_(device) {
  DeviceGuard guard(device_);
  {
    Watchdog::Scope scope = Watchdog::instance().track("ncclCommInitRank (NCCL start-up)");
    MB_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
  }
  stream_ = cuda::poolStream(device_);  // never destroyed: see CudaStreams.h
  ready_ = std::make_shared<Event>();
  monitor_ = std::thread([this] { monitorLoop(); });
}

NcclCommunicator::~NcclCommunicator() {
  stopMonitor();
  releaseNccl();
}

void NcclCommunicator::stopMonitor() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (monitor_.joinable()) monitor_.join();
}

// Note [NCCL teardown]
// The destructor never throws and never aborts: it may run while the process exits, e.g. for a
// communicator held by a static that is destroyed after the CUDA runtime has shut down. Then
// every CUDA call fails (cudaErrorCudartUnloading) and NCCL's would touch freed state, so nothing
// is released: the exiting process frees it. Otherwise a communicator with an asynchronous error
// is aborted (ncclCommDestroy would wait for its stuck work), a healthy one destroyed, and a
// failure is logged. One that abort() already ended has nothing left to free.
void NcclCommunicator::releaseNccl() noexcept {
  int previous = 0;
  cudaError_t runtime = cudaGetDevice(&previous);
  if (runtime != cudaSuccess) {
    if (comm_ != nullptr && !aborted_) {  // likely after the logger too: plain stderr
      std::fprintf(stderr,
                   "megabatch: [dist] the NCCL communicator of rank %d is left to the exiting "
                   "process: the CUDA runtime is gone (%s)\n",
                   rank_, cudaGetErrorString(runtime));
    }
    return;
  }
  if (previous != device_) cudaSetDevice(device_);
  if (comm_ != nullptr && !aborted_.exchange(true)) endComm();
  inFlight_.clear();
  ready_.reset();
  if (previous != device_) cudaSetDevice(previous);
}

void NcclCommunicator::endComm() noexcept {
  ncclResult_t asyncError = ncclSuccess;
  ncclCommGetAsyncError(comm_, &asyncError);
  bool broken = asyncError != ncclSuccess && asyncError != ncclInProgress;
  ncclResult_t result = broken ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
  if (result == ncclSuccess) return;
  try {
    log::get("dist").warn("rank {}: {} failed while tearing down: {} (ignored)", rank_,
                          broken ? "ncclCommAbort" : "ncclCommDestroy", ncclGetErrorString(result));
  } catch (...) {  // nothing may escape a destructor
  }
}

void NcclCommunicator::abort() noexcept {
  if (aborted_.exchange(true) || comm_ == nullptr) return;
  log::get("dist").error("aborting the NCCL communicator of rank {} (ncclCommAbort)", rank_);
  ncclCommAbort(comm_);
}

void NcclCommunicator::requireDeviceTensor(const at::Tensor& tensor,
                                           const std::string& label) const {
  if (!tensor.is_cuda() || tensor.device().index() != device_)
    throw RuntimeError(label + ": the NCCL communicator of rank " + std::to_string(rank_) +
                       " works on cuda:" + std::to_string(device_) + " tensors, got one on " +
                       tensor.device().str() + " (internal error: use the control communicator)");
  if (!tensor.is_contiguous())
    throw RuntimeError(label + ": collectives need contiguous tensors (internal error)");
  if (aborted_) throw RuntimeError(label + ": the NCCL communicator was aborted");
}

template <class Enqueue>
std::shared_ptr<Event> NcclCommunicator::run(const at::Tensor& tensor, const std::string& what,
                                             Enqueue enqueue) {
  DeviceGuard guard(device_);
  cudaStream_t compute = cuda::currentStream(device_);
  MB_CUDA_CHECK(cudaEventRecord(ready_->get(), compute));
  MB_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_->get(), 0));
  maybeInjectHang(rank_, what);  // a rank stuck before it enters the collective
  Watchdog::Scope scope = Watchdog::instance().track(what);
  enqueue();
  auto done = std::make_shared<Event>();
  MB_CUDA_CHECK(cudaEventRecord(done->get(), stream_));
  // The caller may free `tensor` right after wait(); its memory must not be reused for new
  // work before the collective that reads and writes it is over.
  if (tensor.numel() > 0) cuda::recordStream(tensor, stream_);
  inFlight_.push_back(InFlight{done, std::move(scope)});
  wake_.notify_all();
  return done;
}

std::shared_ptr<Work> NcclCommunicator::allReduceAsync(at::Tensor tensor, ReduceOp op,
                                                       const std::string& label) {
  requireDeviceTensor(tensor, label);
  ncclDataType_t type = ncclType(tensor.scalar_type(), label);
  bool floating = at::isFloatingType(tensor.scalar_type());
  // NCCL's integer average truncates toward zero; the MPI backend floors: sum here, floor-divide
  // in wait() so every backend returns the same values.
  ncclRedOp_t nop = op == ReduceOp::kAvg && !floating ? ncclSum : ncclOp(op);
  int floorDivisor = op == ReduceOp::kAvg && !floating ? size_ : 1;
  std::lock_guard<std::mutex> lock(mutex_);
  auto done = run(tensor, describe(label, tensor), [&] {
    void* data = tensor.data_ptr();
    MB_NCCL_CHECK(ncclAllReduce(data, data, static_cast<std::size_t>(tensor.numel()), type, nop,
                                comm_, stream_));
  });
  return std::make_shared<NcclWork>(device_, std::move(done), tensor, floorDivisor);
}

void NcclCommunicator::broadcast(at::Tensor tensor, int root, const std::string& label) {
  requireDeviceTensor(tensor, label);
  std::shared_ptr<Event> done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done = run(tensor, describe(label, tensor), [&] {
      void* data = tensor.data_ptr();
      std::size_t bytes = static_cast<std::size_t>(tensor.numel() * tensor.element_size());
      MB_NCCL_CHECK(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_));
    });
  }
  NcclWork(device_, std::move(done), tensor, 1).wait();
}

at::Tensor NcclCommunicator::allGather(const at::Tensor& tensor, const std::string& label) {
  at::Tensor input = tensor.contiguous();
  requireDeviceTensor(input, label);
  std::vector<std::int64_t> shape{size_};
  shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
  at::Tensor output = at::empty(shape, input.options());
  std::shared_ptr<Event> done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done = run(input, describe(label, input), [&] {
      std::size_t bytes = static_cast<std::size_t>(input.numel() * input.element_size());
      MB_NCCL_CHECK(
          ncclAllGather(input.data_ptr(), output.data_ptr(), bytes, ncclUint8, comm_, stream_));
    });
    if (output.numel() > 0) cuda::recordStream(output, stream_);
  }
  NcclWork(device_, std::move(done), output, 1).wait();
  return output;
}

void NcclCommunicator::barrier(const std::string& label) {
  // NCCL has no barrier: a one-element all-reduce, and this host waits for it (only for this
  // communicator's stream, not the whole device).
  at::Tensor token =
      at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device_));
  std::shared_ptr<Event> done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done = run(token, label, [&] {
      MB_NCCL_CHECK(ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat32, ncclSum,
                                  comm_, stream_));
    });
  }
  Watchdog::Scope scope = Watchdog::instance().track(label + " (host wait)");
  MB_CUDA_CHECK(cudaEventSynchronize(done->get()));
}

void NcclCommunicator::monitorLoop() {
  cudaSetDevice(device_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(inFlight_.empty() ? 500 : 20));
    // Collectives complete in stream order: retire finished ones from the front.
    while (!inFlight_.empty()) {
      cudaError_t status = cudaEventQuery(inFlight_.front().done->get());
      if (status == cudaErrorNotReady) break;
      if (status != cudaSuccess) {
        std::string what = "CUDA error " + std::string(cudaGetErrorString(status)) +
                           " in the NCCL stream of rank " + std::to_string(rank_);
        lock.unlock();
        Watchdog::instance().terminate(what);
      }
      inFlight_.pop_front();  // closes the collective's watchdog scope
    }
    if (aborted_) continue;
    ncclResult_t asyncError = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &asyncError) == ncclSuccess && asyncError != ncclSuccess &&
        asyncError != ncclInProgress) {
      std::string what = "NCCL error on rank " + std::to_string(rank_) + ": " +
                         ncclGetErrorString(asyncError) + " (a peer rank probably failed)";
      lock.unlock();
      Watchdog::instance().terminate(what);
    }
  }
}

// --- start-up -------------------------------------------------------------------

// "host/PCI bus id" of this rank's GPU; NCCL refuses two ranks on one GPU, so find them first
// and name them.
void checkDistinctGpus(Communicator& control, int deviceIndex) {
  constexpr std::int64_t kRecord = 256;
  at::Tensor record = at::zeros({kRecord}, at::kByte);
  agreed(control, "selecting the CUDA device for NCCL", [&] {
    MB_CUDA_CHECK(cudaSetDevice(deviceIndex));
    char busId[64] = {0};
    MB_CUDA_CHECK(cudaDeviceGetPCIBusId(busId, sizeof(busId) - 1, deviceIndex));
    std::string text = (env::hostName() + "/" + busId).substr(0, kRecord - 1);
    std::memcpy(record.data_ptr(), text.data(), text.size());
  });
  at::Tensor all = control.allGather(record, "NCCL GPU check");  // [W, kRecord], CPU
  std::vector<std::string> ids;
  for (int r = 0; r < control.size(); ++r)
    ids.emplace_back(reinterpret_cast<const char*>(all[r].data_ptr()));
  for (int r = 0; r < control.size(); ++r) {
    for (int q = 0; q < r; ++q) {
      if (ids[q] != ids[r]) continue;
      ConfigError error("ranks " + std::to_string(q) + " and " + std::to_string(r) +
                            " would share GPU " + ids[r] + "; NCCL needs one GPU per rank",
                        "launch at most as many ranks per node as it has GPUs (check "
                        "CUDA_VISIBLE_DEVICES), or use dist.backend=mpi");
      error.markAgreed();
      throw error;
    }
  }
}

}  // namespace

std::shared_ptr<Communicator> makeNcclCommunicator(Communicator& control, int deviceIndex) {
  checkDistinctGpus(control, deviceIndex);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  agreed(control, "creating the NCCL unique id", [&] {
    if (control.rank() == 0) MB_NCCL_CHECK(ncclGetUniqueId(&id));
  });
  at::Tensor bytes = at::empty({static_cast<std::int64_t>(sizeof(id))}, at::kByte);
  std::memcpy(bytes.data_ptr(), &id, sizeof(id));
  control.broadcast(bytes, 0, "NCCL unique id");
  std::memcpy(&id, bytes.data_ptr(), sizeof(id));

  auto comm = std::make_shared<NcclCommunicator>(id, control.rank(), control.size(), deviceIndex);
  // Abort first when the watchdog ends a hung job, so no kernel keeps a peer waiting.
  std::weak_ptr<NcclCommunicator> weak = comm;
  Watchdog::instance().addAbortHook([weak] {
    if (auto alive = weak.lock()) alive->abort();
  });
  int version = 0;
  ncclGetVersion(&version);
  log::get("dist").info("NCCL {} communicator ready: {} ranks (rank {} on cuda:{})", version,
                        control.size(), control.rank(), deviceIndex);
  return comm;
}

}  // namespace mb::dist
