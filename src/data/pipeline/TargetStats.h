#pragma once
// What the trainer needs to know about the loaded targets, over every rank's stores. Each is
// collective over `comm` (every rank calls it with its own stores) and returns the same on
// every rank.
#include <array>
#include <cstdint>
#include <vector>

#include "data/Schema.h"
#include "data/pipeline/Store.h"

namespace mb::dist {
class Communicator;
}

namespace mb::data {

// Classes = largest label anywhere + 1, or `configured` (model.num_classes, when > 0), checked
// against the labels. Throws an agreed DataError for labels that are no class indices.
std::int64_t countClasses(const std::array<Store, 3>& stores, const FileSchema& schema,
                          std::int64_t configured, dist::Communicator& comm);

// Labels per class over every rank's train part.
std::vector<std::int64_t> trainClassCounts(const Store& train, std::int64_t classes,
                                           dist::Communicator& comm);

// Note [Baselines]: the mean target per term over every rank's train part; empty when a term
// has no target.
std::vector<double> trainTargetMean(const Store& train,
                                    const std::vector<std::int64_t>& targetShape,
                                    dist::Communicator& comm);

}  // namespace mb::data
