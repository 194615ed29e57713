#include "model/StateDict.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Strings.h"

namespace mb::model {
namespace {

constexpr std::size_t kMaxNamesShown = 8;

// "file.h5 group /model", for messages.
std::string where(hid_t group) {
  std::string path(256, '\0');
  ssize_t length = H5Iget_name(group, path.data(), path.size());
  path.resize(length > 0 ? std::min<std::size_t>(static_cast<std::size_t>(length), path.size() - 1)
                         : 0);
  return h5::fileNameOf(group) + " group " + (path.empty() ? std::string("?") : path);
}

std::string listNames(const std::vector<std::string>& names) {
  std::vector<std::string> shown(names.begin(),
                                 names.begin() + std::min(names.size(), kMaxNamesShown));
  std::string text = str::join(shown, ", ");
  if (names.size() > kMaxNamesShown)
    text += ", ... (" + std::to_string(names.size() - kMaxNamesShown) + " more)";
  return text;
}

// Parameters and buffers (the entries that own storage), in registration order.
NamedTensors ownedEntries(const Model& model) {
  NamedTensors entries;
  for (const auto& item : model.named_parameters())
    entries.emplace_back(item.key(), item.value());
  for (const auto& item : model.named_buffers())
    entries.emplace_back(item.key(), item.value());
  return entries;
}

const at::Tensor& findEntry(const NamedTensors& entries, const std::string& name) {
  for (const auto& [entryName, tensor] : entries) {
    if (entryName == name) return tensor;
  }
  throw RuntimeError("state_dict: tied weight source '" + name + "' is not a parameter");
}

void checkShape(hid_t group, const std::string& name, const at::Tensor& expected) {
  h5::Handle dataset = h5::openDataset(group, name, ExitCode::kCheckpoint);
  h5::DatasetInfo info = h5::describe(dataset.get());
  if (info.dims != expected.sizes().vec())
    throw CheckpointError(where(group) + ": '" + name + "' has shape " + str::shapeText(info.dims) +
                              " but the model expects " + str::shapeText(expected.sizes()),
                          "the checkpoint was written with other model.* settings (hidden, "
                          "layers, heads, vocab_size) or for other data; use the same config");
  if (info.typeClass != H5T_FLOAT && info.typeClass != H5T_INTEGER)
    throw CheckpointError(where(group) + ": '" + name + "' holds " + info.typeName() +
                          ", expected numbers");
}

at::Tensor readEntry(hid_t group, const std::string& name, const at::Tensor& like) {
  checkShape(group, name, like);
  at::ScalarType as = at::isFloatingType(like.scalar_type()) ? at::kFloat : like.scalar_type();
  return h5::readTensor(group, name, ExitCode::kCheckpoint, as);
}

}  // namespace

NamedTensors stateDict(const Model& model) {
  NamedTensors entries = ownedEntries(model);
  NamedTensors aliases;
  for (const auto& [alias, source] : model.tiedWeights()) {
    aliases.emplace_back(alias, findEntry(entries, source));
  }
  entries.insert(entries.end(), aliases.begin(), aliases.end());
  return entries;
}

void writeStateDict(const Model& model, hid_t group) {
  h5::WriteOptions options;
  options.fletcher32 = true;
  for (const auto& [name, tensor] : stateDict(model)) {
    at::Tensor data = tensor.detach();
    if (at::isFloatingType(data.scalar_type())) data = data.to(at::kFloat);
    h5::writeTensor(group, name, data, options, ExitCode::kCheckpoint);
  }
}

void loadStateDict(Model& model, hid_t group) {
  NamedTensors owned = ownedEntries(model);
  auto tied = model.tiedWeights();
  std::set<std::string> expected, aliases;
  for (const auto& entry : owned)
    expected.insert(entry.first);
  for (const auto& pair : tied)
    aliases.insert(pair.first);

  std::vector<std::string> inFile = h5::listGroup(group);
  std::set<std::string> present(inFile.begin(), inFile.end());
  std::vector<std::string> missing, unexpected;
  for (const auto& entry : owned) {
    if (!present.count(entry.first)) missing.push_back(entry.first);
  }
  for (const auto& name : inFile) {
    if (!expected.count(name) && !aliases.count(name)) unexpected.push_back(name);
  }
  if (!missing.empty() || !unexpected.empty()) {
    std::string message = where(group) + " does not match the " + model.kind() + " model:";
    if (!missing.empty())
      message += " missing " + std::to_string(missing.size()) + " (" + listNames(missing) + ")";
    if (!unexpected.empty())
      message += std::string(missing.empty() ? "" : ";") + " unexpected " +
                 std::to_string(unexpected.size()) + " (" + listNames(unexpected) + ")";
    throw CheckpointError(message,
                          "the checkpoint was written for another model.kind, data.streams, or "
                          "model.layers; use the config it was trained with");
  }

  // Read everything before touching the model, so a failure leaves it unchanged.
  std::vector<at::Tensor> values;
  for (const auto& [name, tensor] : owned)
    values.push_back(readEntry(group, name, tensor));
  for (const auto& [alias, source] : tied) {
    if (!present.count(alias)) continue;
    const at::Tensor& target = findEntry(owned, source);
    at::Tensor aliasValue = readEntry(group, alias, target);
    std::size_t index = 0;
    while (owned[index].first != source)
      ++index;
    if (!at::equal(aliasValue, values[index]))
      throw CheckpointError(where(group) + ": tied weights '" + alias + "' and '" + source +
                                "' differ; the model shares one tensor for both",
                            "write both names with the same values (as PyTorch's state_dict "
                            "does), or drop '" +
                                alias + "'");
  }
  at::NoGradGuard noGrad;
  for (std::size_t i = 0; i < owned.size(); ++i) {
    at::Tensor target = owned[i].second;
    target.copy_(values[i].to(target.device(), target.scalar_type()));
  }
}

}  // namespace mb::model
