#include "model/kinds/TorchScriptModel.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <unordered_map>

#include <ATen/Functions.h>
#include <ATen/core/Reduction.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/serialization/import.h>

#include "common/Error.h"
#include "common/Strings.h"
#include "common/TorchCompat.h"
#include "model/kinds/ArchiveBounds.h"

namespace mb::model {
namespace {

// The first line of a LibTorch message (the rest is a C++ or TorchScript backtrace).
std::string firstLine(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

const char* lossName(LossKind loss) {
  switch (loss) {
    case LossKind::kHuber:
      return "huber";
    case LossKind::kCrossEntropy:
      return "cross_entropy";
    default:
      return "mse";
  }
}

const char* kSaveHint =
    "In Python: torch.jit.script(model).save(\"model.pt\") (or torch.jit.save); docs/models.md "
    "\"Your own model\"";

torch::jit::Module loadArchive(const std::string& path) {
  if (path.empty())
    throw ConfigError("model.kind = torchscript needs model.path, the TorchScript archive to train",
                      kSaveHint);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw ConfigError("model.path = " + path + " does not exist or is not a file",
                      "give the path of the archive torch.jit.save wrote (relative paths start "
                      "at the working directory)");
  // Not an archive at all, a torch.save() file, or an archive of a newer PyTorch whose
  // operators this LibTorch lacks: LibTorch's first line tells which.
  const std::string hint = "save a scripted module with a PyTorch no newer than this LibTorch (" +
                           compat::torchVersion() +
                           "); torch.save() files (pickled modules, state_dicts) cannot be "
                           "trained. " +
                           kSaveHint;
  checkArchiveBounds(path);  // before LibTorch allocates what its records declare
  try {
    return torch::jit::load(path, c10::Device(c10::kCPU));
  } catch (const c10::Error& e) {
    throw ConfigError("model.path = " + path + " does not load as a TorchScript archive (" +
                          firstLine(e.what_without_backtrace()) + ")",
                      hint);
  } catch (const std::exception& e) {
    throw ConfigError("model.path = " + path + " does not load as a TorchScript archive (" +
                          firstLine(e.what()) + ")",
                      hint);
  }
}

// A TorchScript failure ends with the error itself ("RuntimeError: mat1 and mat2 shapes
// cannot be multiplied") after tracebacks of the script: that line first, the rest after it.
std::string scriptError(const std::string& text) {
  std::vector<std::string> lines = str::split(text, '\n');
  while (!lines.empty() && lines.back().find_first_not_of(" \t") == std::string::npos)
    lines.pop_back();
  if (lines.size() < 2) return text;
  std::string last = lines.back();
  lines.pop_back();
  return last + "\n" + str::join(lines, "\n");
}

// Note [TorchScript fusion on the CPU]
// The graph executor fuses a scripted module's elementwise ops with the TensorExpr fuser after
// profiling its first two calls. With Debian 13's LibTorch 2.6 that third call never returned
// for the TwoStreamNet of tests/torchscript/modules.py in fp32 on the CPU (plain PyTorch 2.6
// hangs the same way; under autocast the fuser leaves the graph alone). The CPU runs without the
// fuser; the GPU keeps it.
void keepCpuFusionOff() {
  static const bool off = [] {
    torch::jit::setTensorExprFuserEnabled(false);
    return true;
  }();
  (void)off;
}

// Runs forward; a failure inside the TorchScript code becomes `fail(message)`.
template <class Fail>
at::Tensor callForward(torch::jit::Module& module, std::vector<c10::IValue> inputs, Fail fail) {
  if (!inputs.empty() && inputs.front().isTensor() && inputs.front().toTensor().is_cpu())
    keepCpuFusionOff();
  c10::IValue output;
  try {
    output = module.forward(std::move(inputs));
  } catch (const c10::Error& e) {
    fail(scriptError(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    fail(scriptError(e.what()));
  }
  if (!output.isTensor()) fail("forward returned a " + output.tagKind() + ", not a Tensor");
  return output.toTensor();
}

}  // namespace

TorchScriptModel::TorchScriptModel(const ModelConfig& config, const data::DataInfo& info)
    : path_(config.path), script_(loadArchive(config.path)), inputs_(info.inputs) {
  archiveTraining_ = script_.is_training();
  if (info.vocabSize > 0) {
    vocab_ = info.vocabSize;
    context_ = info.targetShape.empty() ? 0 : info.targetShape[0];
  } else {
    objective_.emplace(config, info);
    flatTargets_ = objective_->task() == Task::kRegression && info.targetShape.empty();
  }
  checkSignature();
  adoptState();
  if (parameters().empty())
    throw ConfigError(path_ + " has no trainable parameters (none, or all requires_grad=False)",
                      "register them as nn.Parameter (e.g. through nn.Linear) in the module "
                      "before scripting it");
  checkOnProbeBatch();
}

// --- the contract ----------------------------------------------------------------

std::string TorchScriptModel::expectedOutput() const {
  if (vocab_ > 0)
    return "[B, " + std::to_string(context_) + ", V] logits with V >= vocab_size " +
           std::to_string(vocab_);
  const std::string k = std::to_string(objective_->outputs());
  if (objective_->task() == Task::kClassification)
    return "[B, " + k + "] logits (model.num_classes or the data's classes)";
  if (flatTargets_) return "[B, 1] or [B]";
  return "[B, " + k + "]";
}

std::string TorchScriptModel::expectedSignature() const {
  std::string text = "forward(self";
  for (const auto& input : inputs_) {
    std::string name = input.name.empty() ? "x" : input.name;
    if (input.features == 0)
      text += ", " + name + ": Tensor[B, " + std::to_string(input.window) + "] int64";
    else if (input.window == 0)
      text += ", " + name + ": Tensor[B, " + std::to_string(input.features) + "]";
    else
      text += ", " + name + ": Tensor[B, " + std::to_string(input.window) + ", " +
              std::to_string(input.features) + "]";
  }
  return text + ") -> Tensor" + expectedOutput();
}

std::optional<std::string> TorchScriptModel::outputProblem(const at::Tensor& output,
                                                           std::int64_t batch) const {
  const std::string got = "forward returned " + str::shapeText(output.sizes());
  const std::string here = " (B = " + std::to_string(batch) + " here)";
  if (!at::isFloatingType(output.scalar_type()))
    return got + " of " + std::string(c10::toString(output.scalar_type())) +
           "; the objective needs floating-point outputs";
  if (vocab_ > 0) {
    if (output.dim() != 3 || output.size(0) != batch || output.size(1) != context_ ||
        output.size(2) < vocab_)
      return got + "; next-token cross-entropy expects " + expectedOutput() + here;
    return std::nullopt;
  }
  const std::int64_t k = objective_->outputs();
  const bool ok = (output.dim() == 2 && output.size(0) == batch && output.size(1) == k) ||
                  (flatTargets_ && output.dim() == 1 && output.size(0) == batch);
  if (ok) return std::nullopt;
  const std::string objective = objective_->task() == Task::kClassification
                                    ? "classification (cross_entropy)"
                                    : lossName(objective_->loss());
  return got + "; the " + objective + " objective expects " + expectedOutput() + here;
}

at::Tensor TorchScriptModel::predictions(const at::Tensor& output) const {
  if (objective_ && output.dim() == 2) return objective_->predictions(output);
  return output;
}

void TorchScriptModel::checkSignature() const {
  const std::string fix = "megabatch calls " + expectedSignature();
  auto method = script_.find_method("forward");
  if (!method)
    throw ConfigError(path_ + " has no forward method",
                      "define forward in the module before scripting it; " + fix);
  const c10::FunctionSchema& schema = method->function().getSchema();
  std::ostringstream shown;
  shown << schema;
  const std::string where = path_ + ": " + shown.str() + ": ";
  const auto& all = schema.arguments();
  std::vector<c10::Argument> arguments(all.begin() + 1, all.end());  // [0] is self
  const auto required = static_cast<std::size_t>(
      std::count_if(arguments.begin(), arguments.end(),
                    [](const c10::Argument& a) { return !a.default_value().has_value(); }));
  if (inputs_.size() < required || inputs_.size() > arguments.size())
    throw ConfigError(where + "forward takes " + std::to_string(arguments.size()) +
                          " argument(s), but megabatch passes " + std::to_string(inputs_.size()) +
                          " (one per input of the data)",
                      fix);
  std::vector<std::string> names, expected;
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    const c10::Argument& argument = arguments[i];
    if (argument.type()->kind() != c10::TypeKind::TensorType)
      throw ConfigError(where + "argument '" + argument.name() + "' is " +
                            argument.type()->annotation_str() + ", but megabatch passes a Tensor",
                        fix);
    names.push_back(argument.name());
    expected.push_back(inputs_[i].name);
  }
  std::vector<std::string> sortedNames = names, sortedExpected = expected;
  std::sort(sortedNames.begin(), sortedNames.end());
  std::sort(sortedExpected.begin(), sortedExpected.end());
  if (names != expected && sortedNames == sortedExpected)
    throw ConfigError(where + "the arguments (" + str::join(names, ", ") +
                          ") name the data's inputs in another order than megabatch passes them (" +
                          str::join(expected, ", ") + ", the order of data.streams)",
                      "reorder forward's arguments or data.streams: inputs are passed by position");
  const auto& returns = schema.returns();
  if (returns.size() != 1 || returns[0].type()->kind() != c10::TypeKind::TensorType)
    throw ConfigError(where + "forward must return one Tensor", fix);
}

void TorchScriptModel::checkOnProbeBatch() const {
  // A batch size unlike every other dimension, so a transposed output cannot pass.
  std::vector<std::int64_t> dims{context_, vocab_};
  for (const auto& input : inputs_) {
    dims.push_back(input.window);
    dims.push_back(input.features);
  }
  if (objective_) dims.push_back(objective_->outputs());
  std::int64_t batch = 3;
  while (std::find(dims.begin(), dims.end(), batch) != dims.end())
    batch += 2;

  // A clone: the probe must leave no running statistics and no executor state behind.
  torch::jit::Module probe = script_.clone();
  for (bool training : {true, false}) {
    const std::string mode = training ? "train" : "eval";
    std::vector<c10::IValue> inputs;
    for (const auto& input : inputs_) {
      if (input.features == 0)
        inputs.emplace_back(at::randint(vocab_, {batch, input.window}, at::kLong));
      else if (input.window == 0)
        inputs.emplace_back(at::randn({batch, input.features}));
      else
        inputs.emplace_back(at::randn({batch, input.window, input.features}));
    }
    probe.train(training);
    at::AutoGradMode gradMode(training);
    at::Tensor output = callForward(probe, std::move(inputs), [&](const std::string& message) {
      throw ConfigError(path_ + ": forward failed in " + mode +
                            " mode on a random batch of the data's shapes (B = " +
                            std::to_string(batch) + "): " + message,
                        "megabatch calls " + expectedSignature());
    });
    if (auto problem = outputProblem(output, batch))
      throw ConfigError(path_ + ": in " + mode + " mode, " + *problem,
                        "megabatch calls " + expectedSignature());
    if (training && !output.requires_grad())
      throw ConfigError(path_ +
                            ": the output of forward does not depend on any trainable "
                            "parameter, so there is nothing to train",
                        "compute the output from the module's parameters (no .detach() or "
                        "torch.no_grad() in forward)");
  }
}

// --- state (Note [TorchScript state]) -------------------------------------------------

torch::nn::Module& TorchScriptModel::mirrorOf(const std::string& dottedPrefix) {
  torch::nn::Module* node = this;
  for (const std::string& part : str::split(dottedPrefix, '.')) {
    if (part.empty()) continue;
    auto children = node->named_children();
    if (auto* child = children.find(part))
      node = child->get();
    else
      node = node->register_module(part, std::make_shared<torch::nn::Module>()).get();
  }
  return *node;
}

void TorchScriptModel::adoptState() {
  std::unordered_map<const c10::TensorImpl*, std::string> firstName;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> adopted;
  for (const auto& module : script_.named_modules()) {
    const std::string prefix = module.name.empty() ? "" : module.name + ".";
    const c10::ClassTypePtr type = module.value.type();
    const auto object = module.value._ivalue();
    for (std::size_t i = 0; i < type->numAttributes(); ++i) {
      const bool parameter = type->is_parameter(i);
      if (!parameter && !type->is_buffer(i)) continue;
      const c10::IValue& value = object->getSlot(i);
      if (!value.isTensor()) continue;  // e.g. a bias of None
      const at::Tensor& tensor = value.toTensor();
      const std::string name = prefix + type->getAttributeName(i);
      slots_.push_back({object, i, name, tensor, parameter});
      auto [first, isNew] = firstName.emplace(tensor.unsafeGetTensorImpl(), name);
      if (!isNew) {
        tied_.emplace_back(name, first->second);
        continue;
      }
      const auto dot = name.rfind('.');
      torch::nn::Module& owner = mirrorOf(dot == std::string::npos ? "" : name.substr(0, dot));
      const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
      if (parameter && tensor.requires_grad())
        owner.register_parameter(leaf, tensor);
      else
        owner.register_buffer(leaf, tensor);
    }
  }
}

// Note [Buffers the script replaces]
// TorchScript code may assign a new tensor to a buffer (`self.ema = self.ema * 0.9 + x`)
// rather than update it in place as batch norm does. The script's slot then holds a tensor
// the mirror does not, and checkpoints, the cross-rank average and to(device) would miss it.
// After every forward the mirror's tensor takes the new value (set_: no copy) and goes back
// into the slot, so both name one tensor again. Parameters must be updated in place.
void TorchScriptModel::keepStateShared() {
  at::NoGradGuard noGrad;
  for (auto& slot : slots_) {
    const c10::IValue& value = slot.owner->getSlot(slot.index);
    if (value.isTensor() && value.toTensor().is_same(slot.tensor)) continue;
    if (slot.parameter || !value.isTensor())
      throw RuntimeError(path_ + ": forward replaced " +
                             (slot.parameter ? "parameter '" : "buffer '") + slot.name +
                             (value.isTensor() ? "' with a new tensor" : "' with a non-tensor"),
                         "update parameters in place (with torch.no_grad(): p.copy_(...))");
    const at::Tensor fresh = value.toTensor().detach();
    if (fresh.scalar_type() != slot.tensor.scalar_type() || fresh.device() != slot.tensor.device())
      throw RuntimeError(path_ + ": forward replaced buffer '" + slot.name + "' with a " +
                             std::string(c10::toString(fresh.scalar_type())) + " tensor on " +
                             fresh.device().str() + "; it was " +
                             std::string(c10::toString(slot.tensor.scalar_type())) + " on " +
                             slot.tensor.device().str(),
                         "keep a buffer's dtype and device in forward");
    slot.tensor.set_(fresh);
    slot.owner->setSlot(slot.index, slot.tensor);
  }
}

void TorchScriptModel::train(bool on) {
  torch::nn::Module::train(on);
  if (scriptTraining_ != on) {
    script_.train(on);  // every submodule's flag, as Python's Module.train(on)
    scriptTraining_ = on;
  }
}

void TorchScriptModel::saveArchive(const std::string& path) {
  script_.train(archiveTraining_);
  scriptTraining_.reset();  // the next train()/eval() sets every flag again
  try {
    script_.save(path);
  } catch (const std::exception& e) {
    throw RuntimeError("cannot write the TorchScript archive " + path + ": " + firstLine(e.what()),
                       "check that the directory exists and is writable");
  }
}

// --- forward and objective ---------------------------------------------------------------

at::Tensor TorchScriptModel::forward(const data::Batch& batch) {
  if (batch.inputs.size() != inputs_.size())
    throw RuntimeError("torchscript: the batch has " + std::to_string(batch.inputs.size()) +
                       " inputs, the model was built for " + std::to_string(inputs_.size()));
  const std::int64_t rows = batch.inputs.empty() ? 0 : batch.inputs.front().size(0);
  std::vector<c10::IValue> inputs(batch.inputs.begin(), batch.inputs.end());
  at::Tensor output = callForward(script_, std::move(inputs), [&](const std::string& message) {
    throw RuntimeError(path_ + ": forward failed on a batch of " + std::to_string(rows) +
                       " samples: " + message);
  });
  keepStateShared();
  if (auto problem = outputProblem(output, rows)) throw RuntimeError(path_ + ": " + *problem);
  return predictions(output);
}

at::Tensor TorchScriptModel::lossSum(const at::Tensor& output, const data::Batch& batch) {
  if (objective_) return objective_->lossSum(output, batch.targets);
  at::Tensor logits = output.reshape({-1, output.size(-1)}).to(at::kFloat);  // [B x T, V]
  return at::cross_entropy_loss(logits, batch.targets.reshape({-1}).to(at::kLong), {},
                                at::Reduction::Sum);
}

std::int64_t TorchScriptModel::termsPerSample() const {
  return objective_ ? objective_->termsPerSample() : context_;
}

NamedTensors TorchScriptModel::metricSums(const at::Tensor& output, const data::Batch& batch) {
  if (objective_) return objective_->metricSums(output, batch.targets);
  at::NoGradGuard noGrad;
  at::Tensor correct = output.argmax(-1).eq(batch.targets.to(at::kLong)).sum().to(at::kFloat);
  return {{"accuracy", correct}};
}

std::vector<std::string> TorchScriptModel::metricNames() const {
  return objective_ ? objective_->metricNames() : std::vector<std::string>{"accuracy"};
}

ModelKind torchScriptModelKind() {
  ModelKind kind;
  kind.name = "torchscript";
  kind.summary = "your own module: scripted in Python, saved with torch.jit.save (model.path)";
  kind.layouts = {"samples", "series", "tokens"};
  kind.build = [](const ModelConfig& config, const data::DataInfo& info) {
    return std::make_shared<TorchScriptModel>(config, info);
  };
  kind.checkConfig = [](const Config& c) -> std::optional<std::string> {
    if (c.model.path.empty())
      return "model.kind = torchscript needs model.path: the archive torch.jit.save wrote "
             "(docs/models.md \"Your own model\")";
    return std::nullopt;
  };
  kind.exportArchive = [](Model& model, const std::string& path) {
    dynamic_cast<TorchScriptModel&>(model).saveArchive(path);
  };
  return kind;
}

}  // namespace mb::model
