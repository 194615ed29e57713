#pragma once
// model.kind = torchscript: a module written in Python, scripted (torch.jit.script, or traced
// with torch.jit.trace), saved with torch.jit.save, and trained as it is (model.path). The
// archive's code is the forward pass; megabatch supplies the data, the loss of the objective,
// DDP, autocast, the optimizer and the checkpoints. docs/models.md "Your own model" is the
// user's guide.
//
// Security: loading an archive runs no Python, but calling forward runs the TorchScript code
// it holds. Checkpoints hold tensors only: the code stays in model.path and is never copied
// into them (DESIGN.md "Checkpoints": loading never executes code from the file).
//
// Note [TorchScript forward contract]
// forward takes one Tensor per model input, positionally, in DataInfo::inputs order, exactly
// as the layout gathers them (Batch::inputs), and returns one Tensor:
//   samples  forward(x: [B, T, F] or [B, F] float32)
//   series   forward(<stream>: [B, window, F] float32, ...), in data.streams order
//   tokens   forward(idx: [B, context] int64) -> logits [B, context, V'], V' >= vocab_size
//   the output: regression [B, K] ([B, 1] or [B] for [N] targets), classification [B, C]
//   logits with C = model.num_classes or the data's classes.
// The contract is checked when the model is built, before training: the schema of forward
// (count and types of the arguments, a Tensor result, stream names in order when the
// arguments carry them), then one forward pass in train mode (with autograd: the output must
// depend on a parameter) and one in eval mode on a random batch of the data's real shapes,
// run on a clone of the module so that neither its buffers nor its graph executor keep a
// trace of it. Every mismatch is a ConfigError (exit 2) that names the archive and what to
// change.
//
// Note [TorchScript state]
// The archive's parameters and buffers are this model's state, under the names Python's
// state_dict() gives them ("encoder.0.weight"), so checkpoints load into the Python module by
// name. A torch::nn::Module name cannot hold a dot, so a tree of empty nn::Modules mirrors
// the script's submodules and holds the SAME tensors (no copies): the optimizer, the
// gradient reducer, to(device) and the checkpoint code see them as they see a built-in
// model's, and the script computes with them. A tensor reachable under several names (tied
// weights) is registered once, under its first name, and the other names are tiedWeights().
// A parameter with requires_grad = False (frozen in Python) is registered as a buffer: saved
// and restored, never updated. train()/eval() switch the script's `training` flags too. A
// buffer the script replaces in forward is shared again afterwards (Note [Buffers the script
// replaces] in TorchScriptModel.cpp).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/jit/api/module.h>

#include "model/Model.h"
#include "model/ModelRegistry.h"
#include "model/parts/Objective.h"

namespace mb::model {

class TorchScriptModel : public Model {
 public:
  // Loads model.path and checks it against the data (Note [TorchScript forward contract]).
  // Throws ConfigError naming the archive and the fix.
  TorchScriptModel(const ModelConfig& config, const data::DataInfo& info);

  at::Tensor forward(const data::Batch& batch) override;
  at::Tensor lossSum(const at::Tensor& output, const data::Batch& batch) override;
  std::int64_t termsPerSample() const override;
  NamedTensors metricSums(const at::Tensor& output, const data::Batch& batch) override;
  std::vector<std::string> metricNames() const override;
  std::string kind() const override { return "torchscript"; }
  std::vector<std::pair<std::string, std::string>> tiedWeights() const override { return tied_; }
  void train(bool on = true) override;

  // Writes the archive to `path` with the current weights and the train/eval flag it was
  // loaded with: torch.jit.load(path) in Python gives the trained module.
  void saveArchive(const std::string& path);

 private:
  // Outputs the objective accepts: a description ("[B, 1] or [B]") and the check.
  std::string expectedOutput() const;
  std::optional<std::string> outputProblem(const at::Tensor& output, std::int64_t batch) const;
  // The output as the objective takes it ([B, 1] -> [B] for [N] targets).
  at::Tensor predictions(const at::Tensor& output) const;
  std::string expectedSignature() const;
  void checkSignature() const;
  void checkOnProbeBatch() const;
  void adoptState();
  torch::nn::Module& mirrorOf(const std::string& dottedPrefix);
  void keepStateShared();

  // A parameter or buffer slot of a script object and the tensor the mirror holds for it.
  struct StateSlot {
    c10::intrusive_ptr<c10::ivalue::Object> owner;
    std::size_t index;
    std::string name;  // state_dict name
    at::Tensor tensor;
    bool parameter;
  };

  std::string path_;  // model.path, for messages
  torch::jit::Module script_;
  bool archiveTraining_ = true;          // the `training` flag the archive was saved with
  std::optional<bool> scriptTraining_;   // the flag train() last gave every submodule
  std::vector<data::InputSpec> inputs_;  // DataInfo::inputs: one forward argument each
  std::optional<Objective> objective_;   // regression or classification; unset for tokens
  bool flatTargets_ = false;             // regression on [N] targets: [B, 1] or [B] outputs
  std::int64_t vocab_ = 0;               // tokens: the data's vocab_size (next-token objective)
  std::int64_t context_ = 0;             // tokens: positions per sample
  std::vector<std::pair<std::string, std::string>> tied_;  // {alias, source}
  std::vector<StateSlot>
      slots_;  // every slot, aliases included (Note [Buffers the script replaces])
};

// model.kind = torchscript, for ModelRegistry.cpp.
ModelKind torchScriptModelKind();

}  // namespace mb::model
