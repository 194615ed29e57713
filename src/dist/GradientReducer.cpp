#include "dist/GradientReducer.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <unordered_set>

#include <ATen/Functions.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "common/Error.h"
#include "common/Log.h"
#include "common/OutOfMemory.h"
#include "common/Strings.h"

namespace mb::dist {

// Note [Gradient buckets as views]
// Each bucket owns one flat buffer [numel] in its parameters' dtype and device. Every
// parameter's .grad is bound to a view of its slice, so backward accumulates straight into
// the buffer and an all-reduce needs no gather or scatter copies (PyTorch DDP's
// gradient_as_bucket_view). The views are detached (no autograd view metadata), so LibTorch
// 1.13's Optimizer::zero_grad(), which calls detach_() on every grad, accepts them.
// Anything that rebinds .grad (zero_grad(set_to_none) in LibTorch 2.x, AccumulateGrad under
// create_graph, user code) is repaired by bindView(): the slice takes a copy of the foreign
// gradient (zeros when it is undefined) and the view is bound again.

// Note [Launch order]
// Every rank must issue the same all-reduces in the same order (Communicator.h). Gradients
// become ready in an order that can differ between ranks (unused parameters, a rank with no
// samples, autograd scheduling), so a bucket is launched only after every bucket before it:
// a bucket that completes early waits for its predecessors (c10d's next_bucket_).

namespace {

using Clock = std::chrono::steady_clock;

bool isBoundTo(const at::Tensor& grad, const at::Tensor& view) {
  return grad.defined() && !grad.is_sparse() && grad.data_ptr() == view.data_ptr() &&
         grad.scalar_type() == view.scalar_type() && grad.sizes() == view.sizes() &&
         grad.strides() == view.strides();
}

// The dist.grad_dtype name of a transport dtype, for the logs.
const char* transportName(at::ScalarType type) {
  switch (type) {
    case at::kBFloat16:
      return "bf16";
    case at::kHalf:
      return "fp16";
    default:
      return "fp32";
  }
}

}  // namespace

struct GradientReducer::Impl {
  struct Slot {
    at::Tensor param;
    std::string name;
    std::size_t bucket = 0;
    at::Tensor view;     // the parameter's slice of its bucket's flat buffer, param-shaped
    bool ready = false;  // gradient final on the last micro-step
  };

  struct Bucket {
    std::vector<std::size_t> slots;  // indices into Impl::slots, in reverse registration order
    at::Tensor flat;                 // [numel] in the parameters' dtype and device
    at::Tensor transport;        // [numel] bf16 or fp16 when flat's dtype differs; else undefined
    std::string label;           // "grad bucket 2/5"
    std::size_t pending = 0;     // gradients still to arrive on the last micro-step
    std::shared_ptr<Work> work;  // set once launched
  };

  // Runs after a parameter's AccumulateGrad, on the autograd thread of its device.
  class ReadyHook final : public torch::autograd::FunctionPostHook {
   public:
    ReadyHook(Impl* impl, std::size_t slot) : impl_(impl), slot_(slot) {}
    torch::autograd::variable_list operator()(
        const torch::autograd::variable_list& outputs,
        const torch::autograd::variable_list& /*inputs*/) override {
      impl_->onGradReady(slot_);
      return outputs;
    }

   private:
    Impl* impl_;
    std::size_t slot_;
  };

  enum class Phase {
    kIdle,      // between steps, or on micro-steps before the last (no_sync)
    kReducing,  // last micro-step: hooks mark gradients ready and launch buckets
  };

  std::shared_ptr<Communicator> comm;
  ReducerOptions options;
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  // The accumulators are held so they (and our hooks) outlive each forward's graph.
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, std::uintptr_t>> hooks;

  // Hooks may run on autograd device threads while nothing else runs (backward blocks the
  // caller), but several device threads can run hooks at once.
  std::mutex mutex;
  Phase phase = Phase::kIdle;
  std::size_t nextToLaunch = 0;
  ReducerStats stats;

  void buildBuckets();
  void registerHooks();
  void bindView(Slot& slot);
  void beginReduction();
  void onGradReady(std::size_t slotIndex);
  void launchReady(bool fromHook);
  void launch(Bucket& bucket);
};

void GradientReducer::Impl::buildBuckets() {
  double cap = options.firstBucketMb * 1024.0 * 1024.0;
  Bucket current;
  double currentBytes = 0;
  auto close = [&] {
    if (current.slots.empty()) return;
    buckets.push_back(std::move(current));
    current = Bucket{};
    currentBytes = 0;
    cap = options.bucketMb * 1024.0 * 1024.0;
  };
  // Reverse registration order: backward produces the last layers' gradients first.
  for (std::size_t i = slots.size(); i-- > 0;) {
    const at::Tensor& p = slots[i].param;
    double bytes = static_cast<double>(p.numel() * p.element_size());
    if (!current.slots.empty()) {
      const at::Tensor& first = slots[current.slots.front()].param;
      bool sameKind = first.scalar_type() == p.scalar_type() && first.device() == p.device();
      if (!sameKind || currentBytes + bytes > cap) close();
    }
    current.slots.push_back(i);
    currentBytes += bytes;
  }
  close();

  c10::NoGradGuard noGrad;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    Bucket& bucket = buckets[b];
    const at::Tensor& first = slots[bucket.slots.front()].param;
    std::int64_t numel = 0;
    for (std::size_t s : bucket.slots)
      numel += slots[s].param.numel();
    bucket.flat = at::zeros({numel}, first.options().requires_grad(false));
    // bf16 and fp16 transport compress wider gradients; fp32 "transport" means uncompressed,
    // whatever the parameters' dtype (fp64 stays fp64, a bf16 model sends bf16).
    const at::ScalarType wire = options.transportType;
    bool compress = wire != at::kFloat && first.scalar_type() != wire;
    if (compress) bucket.transport = at::empty({numel}, bucket.flat.options().dtype(wire));
    std::int64_t offset = 0;
    for (std::size_t s : bucket.slots) {
      Slot& slot = slots[s];
      slot.bucket = b;
      std::int64_t n = slot.param.numel();
      // detach(): a plain tensor sharing the storage, not an autograd view (Note above).
      slot.view = bucket.flat.narrow(0, offset, n).view(slot.param.sizes()).detach();
      offset += n;
    }
    bucket.label = "grad bucket " + std::to_string(b + 1) + "/" + std::to_string(buckets.size());
  }
  stats.buckets = static_cast<std::int64_t>(buckets.size());
}

void GradientReducer::Impl::registerHooks() {
  for (std::size_t i = 0; i < slots.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(slots[i].param);
    if (!accumulator)
      throw RuntimeError("gradient reducer: parameter '" + slots[i].name +
                         "' has no gradient accumulator (is it a leaf that requires grad?)");
    std::uintptr_t key = accumulator->add_post_hook(std::make_unique<ReadyHook>(this, i));
    hooks.emplace_back(std::move(accumulator), key);
  }
}

void GradientReducer::Impl::bindView(Slot& slot) {
  at::Tensor& grad = slot.param.mutable_grad();
  if (isBoundTo(grad, slot.view)) return;
  c10::NoGradGuard noGrad;
  if (!grad.defined()) {
    slot.view.zero_();
  } else if (grad.is_sparse()) {
    throw RuntimeError("gradient reducer: parameter '" + slot.name + "' has a sparse gradient",
                       "sparse gradients are not supported: build embeddings with sparse=false");
  } else {
    slot.view.copy_(grad);
  }
  grad = slot.view;
}

void GradientReducer::Impl::beginReduction() {
  for (Slot& slot : slots)
    slot.ready = false;
  for (Bucket& bucket : buckets) {
    bucket.pending = bucket.slots.size();
    bucket.work.reset();
  }
  nextToLaunch = 0;
  phase = Phase::kReducing;
}

void GradientReducer::Impl::onGradReady(std::size_t slotIndex) {
  std::lock_guard<std::mutex> lock(mutex);
  if (phase != Phase::kReducing) return;  // an earlier micro-step: accumulate locally only
  Slot& slot = slots[slotIndex];
  if (slot.ready) {
    throw RuntimeError(
        "gradient reducer: parameter '" + slot.name +
            "' received a second gradient on the last micro-step, after its bucket may have "
            "been sent",
        "call prepareForBackward(false) before every backward of a step but the last, and "
        "prepareForBackward(true) before the last one");
  }
  bindView(slot);  // AccumulateGrad may have replaced .grad (create_graph, set_to_none)
  slot.ready = true;
  if (--buckets[slot.bucket].pending == 0) launchReady(/*fromHook=*/true);
}

void GradientReducer::Impl::launchReady(bool fromHook) {
  while (nextToLaunch < buckets.size() && buckets[nextToLaunch].pending == 0) {
    // Names the launch for an out-of-memory message (the transport copy allocates), and is where
    // MEGABATCH_FAULT_OOM=RANK:sending grad bucket 2 fails a backward with a bucket in flight
    // (Note [A step that runs out of memory is redone]). Before nextToLaunch moves: a bucket
    // whose launch failed is launched again by finishGradients().
    MemoryPhase phase("sending " + buckets[nextToLaunch].label);
    launch(buckets[nextToLaunch]);
    ++nextToLaunch;
    ++(fromHook ? stats.launchedDuringBackward : stats.launchedAtFinish);
  }
}

ReducerOptions reducerOptionsFrom(const DistConfig& config) {
  ReducerOptions options;
  options.bucketMb = config.bucketMb;
  options.firstBucketMb = config.firstBucketMb;
  switch (config.gradDtype) {
    case DType::kBf16:
      options.transportType = at::kBFloat16;
      break;
    case DType::kFp16:
      options.transportType = at::kHalf;
      break;
    case DType::kFp32:
      options.transportType = at::kFloat;
      break;
  }
  return options;
}

void GradientReducer::Impl::launch(Bucket& bucket) {
  at::Tensor payload = bucket.flat;
  if (bucket.transport.defined()) {
    c10::NoGradGuard noGrad;
    bucket.transport.copy_(bucket.flat);
    payload = bucket.transport;
  }
  bucket.work = comm->allReduceAsync(payload, ReduceOp::kSum, bucket.label);
}

GradientReducer::GradientReducer(std::shared_ptr<Communicator> comm, std::vector<at::Tensor> params,
                                 std::vector<std::string> names, ReducerOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (params.size() != names.size())
    throw RuntimeError("gradient reducer: " + std::to_string(params.size()) + " parameters but " +
                       std::to_string(names.size()) + " names");
  if (options.transportType != at::kFloat && options.transportType != at::kBFloat16 &&
      options.transportType != at::kHalf)
    throw ConfigError(std::string("dist.grad_dtype: gradients travel in fp32, bf16 or fp16, not ") +
                      c10::toString(options.transportType));
  impl_->comm = std::move(comm);
  impl_->options = options;
  // Tied weights appear once per owner; reduce each tensor once, under its first name.
  std::unordered_set<const void*> seen;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i].requires_grad()) continue;
    if (!seen.insert(params[i].unsafeGetTensorImpl()).second) continue;
    Impl::Slot slot;
    slot.param = params[i];
    slot.name = names[i];
    impl_->slots.push_back(std::move(slot));
  }
  impl_->buildBuckets();
  impl_->registerHooks();

  auto& logger = log::get("dist");
  for (std::size_t b = 0; b < impl_->buckets.size(); ++b) {
    const auto& bucket = impl_->buckets[b];
    logger.debug(
        "{}: {} parameters, {}{}", bucket.label, bucket.slots.size(),
        str::humanBytes(static_cast<double>(bucket.flat.numel() * bucket.flat.element_size())),
        bucket.transport.defined()
            ? std::string(" (sent as ") + transportName(bucket.transport.scalar_type()) + ")"
            : std::string());
  }
  logger.info(
      "gradient reducer: {} parameters in {} buckets (cap {:g} MiB, first {:g} MiB) over {}",
      impl_->slots.size(), impl_->buckets.size(), options.bucketMb, options.firstBucketMb,
      impl_->comm->backendName());
}

GradientReducer::~GradientReducer() {
  // The hooks point at impl_: detach them before it goes (the accumulators may live on).
  for (auto& [accumulator, key] : impl_->hooks)
    accumulator->del_post_hook(key);
}

void GradientReducer::prepareForBackward(bool lastMicroStep) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->phase == Impl::Phase::kReducing) {
    bool anyReady = std::any_of(impl_->slots.begin(), impl_->slots.end(),
                                [](const Impl::Slot& s) { return s.ready; });
    if (anyReady)
      throw RuntimeError(
          "gradient reducer: prepareForBackward() called after the last micro-step's backward "
          "and before finishGradients()",
          "call finishGradients() once after the last micro-step of every optimizer step");
  }
  for (auto& slot : impl_->slots)
    impl_->bindView(slot);
  if (lastMicroStep) {
    impl_->beginReduction();
  } else {
    impl_->phase = Impl::Phase::kIdle;
  }
}

void GradientReducer::finishGradients() {
  Impl& impl = *impl_;
  std::lock_guard<std::mutex> lock(impl.mutex);
  // A rank with no samples (no backward at all), or a caller that skipped
  // prepareForBackward(true): everything is launched here, with zeros for absent gradients.
  if (impl.phase != Impl::Phase::kReducing) {
    for (auto& slot : impl.slots)
      impl.bindView(slot);
    impl.beginReduction();
  }
  for (std::size_t b = impl.nextToLaunch; b < impl.buckets.size(); ++b) {
    auto& bucket = impl.buckets[b];
    for (std::size_t s : bucket.slots) {
      if (!impl.slots[s].ready)
        impl.bindView(impl.slots[s]);  // unused here: zeros or earlier micro-steps
    }
    bucket.pending = 0;
  }
  impl.launchReady(/*fromHook=*/false);

  auto start = Clock::now();
  try {
    for (auto& bucket : impl.buckets) {
      bucket.work->wait();
      bucket.work.reset();
      if (bucket.transport.defined()) {
        c10::NoGradGuard noGrad;
        bucket.flat.copy_(bucket.transport);
      }
    }
  } catch (...) {
    impl.phase = Impl::Phase::kIdle;  // the caller may agree on the error and stop cleanly
    throw;
  }
  impl.stats.waitSeconds += std::chrono::duration<double>(Clock::now() - start).count();
  // The views already hold the sums; rebind any .grad that something replaced meanwhile.
  for (auto& slot : impl.slots) {
    at::Tensor& grad = slot.param.mutable_grad();
    if (!isBoundTo(grad, slot.view)) grad = slot.view;
  }
  impl.phase = Impl::Phase::kIdle;
}

const ReducerStats& GradientReducer::stats() const {
  return impl_->stats;
}

std::vector<std::vector<std::string>> GradientReducer::bucketLayout() const {
  std::vector<std::vector<std::string>> layout;
  for (const auto& bucket : impl_->buckets) {
    std::vector<std::string> names;
    for (std::size_t s : bucket.slots)
      names.push_back(impl_->slots[s].name);
    layout.push_back(std::move(names));
  }
  return layout;
}

}  // namespace mb::dist
