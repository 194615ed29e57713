// Config parsing, overrides, validation errors, and the resolved-config round trip.
#include <gtest/gtest.h>

#include "common/Error.h"
#include "config/ConfigLoader.h"
#include "config/ConfigSchema.h"
#include "config/ConfigValidator.h"

namespace mb {
namespace {

// Returns the ConfigError message `body` throws; fails the test when it does not throw.
template <class Fn>
std::string configErrorOf(Fn body) {
  try {
    body();
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.code(), ExitCode::kUsage);
    return error.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Config, DefaultsAreValid) {
  const Config defaults;
  EXPECT_TRUE(validateConfig(defaults).empty());
}

TEST(Config, ParsesTypedSections) {
  Config c = parseConfig(R"(
run: {dir: /tmp/r, keep_last: 5}
data:
  path: x.h5
  layout: series
  streams: [{name: m1, window: 480}, {name: h1, window: 96}]
  split: {train_fraction: 0.7, val_fraction: 0.2, test_fraction: 0.1}
model: {kind: lstm, hidden: 32, dropout: 0.1}
train: {global_batch: 128, precision: bf16, max_steps: 1e3}
optim: {name: sgd, lr: 0.05, nesterov: yes}
)",
                         "test.yaml");
  EXPECT_EQ(c.run.dir, "/tmp/r");
  EXPECT_EQ(c.run.keepLast, 5);
  EXPECT_EQ(c.data.layout, "series");
  ASSERT_EQ(c.data.streams.size(), 2u);
  EXPECT_EQ(c.data.streams[1].name, "h1");
  EXPECT_EQ(c.data.streams[1].window, 96);
  EXPECT_DOUBLE_EQ(c.data.split.valFraction, 0.2);
  EXPECT_EQ(c.model.hidden, 32);
  EXPECT_EQ(c.train.precision, Precision::kBf16);
  EXPECT_EQ(c.train.maxSteps, 1000);
  EXPECT_EQ(c.optim.name, OptimizerKind::kSgd);
  EXPECT_TRUE(c.optim.nesterov);
}

TEST(Config, UnknownKeySuggestsClosest) {
  std::string message = configErrorOf([] { parseConfig("optim: {lerning_rate: 1}", "c.yaml"); });
  EXPECT_TRUE(contains(message, "optim.lerning_rate")) << message;
  EXPECT_TRUE(contains(message, "did you mean optim.lr?")) << message;
  message = configErrorOf([] { parseConfig("train: {global_bach: 8}", "c.yaml"); });
  EXPECT_TRUE(contains(message, "did you mean train.global_batch?")) << message;
  message = configErrorOf([] { parseConfig("modle: {kind: lstm}", "c.yaml"); });
  EXPECT_TRUE(contains(message, "unknown config key 'modle'")) << message;
}

TEST(Config, UnknownOverrideKeySuggestsClosest) {
  std::string message = configErrorOf([] { parseConfig("", "c.yaml", {"optim.lerning_rate=1"}); });
  EXPECT_TRUE(contains(message, "did you mean optim.lr?")) << message;
  message = configErrorOf([] { parseConfig("", "c.yaml", {"train.max_step=3"}); });
  EXPECT_TRUE(contains(message, "did you mean train.max_steps?")) << message;
}

// Note [Removed config keys]: refused with the reason and the fix in a user's config file and on
// the command line, skipped in the config a checkpoint written before the removal stores.
TEST(Config, RemovedKeyIsRefusedFromUsersAndSkippedInCheckpoints) {
  std::string message = configErrorOf(
      [] { parseConfig("train: {cuda_graphs: true}", "c.yaml", {}, ConfigOrigin::kUser); });
  EXPECT_TRUE(contains(message, "c.yaml: config key 'train.cuda_graphs' was removed")) << message;
  EXPECT_TRUE(contains(message, "never implemented")) << message;
  EXPECT_TRUE(contains(message, "delete train.cuda_graphs from the config file")) << message;
  EXPECT_FALSE(contains(message, "unknown config key")) << message;
  for (ConfigOrigin origin : {ConfigOrigin::kUser, ConfigOrigin::kCheckpoint}) {
    message =
        configErrorOf([&] { parseConfig("", "c.yaml", {"train.cuda_graphs=false"}, origin); });
    EXPECT_TRUE(contains(message, "override: config key 'train.cuda_graphs' was removed"))
        << message;
    EXPECT_TRUE(contains(message, "delete the override train.cuda_graphs=false")) << message;
  }
  Config stored =
      parseConfig("train: {max_steps: 7, cuda_graphs: true}\noptim: {lr: 0.5}", "ckpt /meta");
  EXPECT_EQ(stored.train.maxSteps, 7);
  EXPECT_DOUBLE_EQ(stored.optim.lr, 0.5);
  EXPECT_FALSE(contains(configToYaml(stored), "cuda_graphs"));
  EXPECT_EQ(findConfigField("train.cuda_graphs"), nullptr);
  ASSERT_NE(findRemovedConfigKey("train.cuda_graphs"), nullptr);
  EXPECT_EQ(findRemovedConfigKey("train.max_steps"), nullptr);
  // Other unknown keys stay errors in a checkpoint's config too.
  message = configErrorOf([] { parseConfig("train: {cuda_graph: true}", "ckpt /meta"); });
  EXPECT_TRUE(contains(message, "unknown config key 'train.cuda_graph'")) << message;
}

TEST(Config, WrongTypeNamesKeyAndValue) {
  std::string message = configErrorOf([] { parseConfig("train: {global_batch: many}", "c.yaml"); });
  EXPECT_TRUE(contains(message, "c.yaml: train.global_batch")) << message;  // names the file
  EXPECT_TRUE(contains(message, "'many'")) << message;
  message = configErrorOf([] { parseConfig("optim: {name: adamx}", "c.yaml"); });
  EXPECT_TRUE(contains(message, "adamw|adam|sgd")) << message;
  EXPECT_TRUE(contains(message, "did you mean adamw?")) << message;
  message = configErrorOf([] { parseConfig("data: {shuffle: perhaps}", "c.yaml"); });
  EXPECT_TRUE(contains(message, "data.shuffle")) << message;
  message = configErrorOf([] { parseConfig("optim: {lr: [1, 2]}", "c.yaml"); });
  EXPECT_TRUE(contains(message, "optim.lr")) << message;
}

TEST(Config, OutOfRangeNamesKeyAndValue) {
  std::string message = configErrorOf([] { parseConfig("optim: {lr: -1}", "c.yaml"); });
  EXPECT_TRUE(contains(message, "optim.lr = -1")) << message;
  message = configErrorOf([] { parseConfig("model: {dropout: 1.5}", "c.yaml"); });
  EXPECT_TRUE(contains(message, "model.dropout = 1.5")) << message;
  message = configErrorOf([] { parseConfig("model: {num_classes: 2000000}", "c.yaml"); });
  EXPECT_TRUE(contains(message, "model.num_classes = 2000000 is more than the 1048576 classes"))
      << message;
  EXPECT_NO_THROW(parseConfig("model: {num_classes: 1048576}", "c.yaml"));
  message = configErrorOf([] {
    parseConfig("data: {split: {train_fraction: 0.9, val_fraction: 0.2, test_fraction: 0.1}}",
                "c.yaml");
  });
  EXPECT_TRUE(contains(message, "sum to 1")) << message;
}

TEST(Config, ReportsEveryProblemAtOnce) {
  std::string message =
      configErrorOf([] { parseConfig("optim: {lr: 0}\ntrain: {global_batch: 0}", "c.yaml"); });
  EXPECT_TRUE(contains(message, "2 problems")) << message;
  EXPECT_TRUE(contains(message, "optim.lr")) << message;
  EXPECT_TRUE(contains(message, "train.global_batch")) << message;
}

TEST(Config, CrossFieldRules) {
  EXPECT_TRUE(contains(configErrorOf([] { parseConfig("data: {layout: series}", "c.yaml"); }),
                       "needs data.streams"));
  EXPECT_TRUE(contains(configErrorOf([] { parseConfig("model: {kind: gpt}", "c.yaml"); }),
                       "needs data.layout = tokens"));
  EXPECT_TRUE(contains(
      configErrorOf([] { parseConfig("train: {global_batch: 4, micro_batch: 8}", "c.yaml"); }),
      "train.micro_batch = 8"));
  EXPECT_TRUE(contains(
      configErrorOf([] {
        parseConfig("data: {layout: tokens}\nmodel: {kind: gpt, hidden: 30, heads: 4}", "c.yaml");
      }),
      "divisible"));
}

// Note [Automatic micro-batch]: `auto` is a value of train.micro_batch, printed back as auto.
TEST(Config, MicroBatchTakesAutoAndPrintsItBack) {
  Config c = parseConfig("train: {micro_batch: auto}", "c.yaml");
  EXPECT_EQ(c.train.microBatch, kAutoMicroBatch);
  EXPECT_TRUE(contains(configToYaml(c), "micro_batch: auto"));
  EXPECT_EQ(parseConfig(configToYaml(c), "resolved.yaml").train.microBatch, kAutoMicroBatch);
  EXPECT_EQ(parseConfig("", "c.yaml", {"train.micro_batch=16"}).train.microBatch, 16);
  EXPECT_TRUE(contains(configErrorOf([] { parseConfig("", "c.yaml", {"train.micro_batch=-1"}); }),
                       "expected an integer >= 0, or auto"));
  EXPECT_TRUE(contains(configErrorOf([] { parseConfig("", "c.yaml", {"train.micro_batch=big"}); }),
                       "train.micro_batch (or auto): expected an integer"));
  EXPECT_TRUE(contains(configErrorOf([] {
                         parseConfig("train: {micro_batch: auto, memory_plan: false}", "c.yaml");
                       }),
                       "set train.memory_plan = true"));
  EXPECT_TRUE(contains(configErrorOf([] {
                         parseConfig(
                             "model: {stateful: true}\ndata: {shuffle: false}\n"
                             "train: {micro_batch: auto}",
                             "c.yaml");
                       }),
                       "set train.micro_batch by hand"));
}

TEST(Config, OverridesApplyAfterFile) {
  Config c = parseConfig(
      "optim: {lr: 0.1}", "c.yaml",
      {"optim.lr=1e-3", "train.max_steps=100", "data.streams=[{name: m5, window: 12}]"});
  EXPECT_DOUBLE_EQ(c.optim.lr, 1e-3);
  EXPECT_EQ(c.train.maxSteps, 100);
  ASSERT_EQ(c.data.streams.size(), 1u);
  EXPECT_EQ(c.data.streams[0].window, 12);
}

TEST(Config, MalformedOverrideAndYaml) {
  EXPECT_TRUE(
      contains(configErrorOf([] { parseConfig("", "c.yaml", {"optim.lr"}); }), "key=value"));
  EXPECT_TRUE(
      contains(configErrorOf([] { parseConfig("", "c.yaml", {"optim=3"}); }), "names a section"));
  EXPECT_TRUE(
      contains(configErrorOf([] { parseConfig("optim: {lr: 1", "c.yaml"); }), "not valid YAML"));
  EXPECT_TRUE(
      contains(configErrorOf([] { parseConfig("optim: 3", "c.yaml"); }), "expected a section"));
  EXPECT_TRUE(
      contains(configErrorOf([] { loadConfigFile("/nonexistent/c.yaml"); }), "cannot read config"));
}

// Found by the config fuzzer: a stream key that is a list escaped as YAML::BadConversion.
TEST(Config, StreamKeysThatAreNotNamesAreConfigErrors) {
  std::string message = configErrorOf([] { parseConfig("data: {streams: [{[a]: 1}]}", "c.yaml"); });
  EXPECT_TRUE(contains(message, "data.streams[0].")) << message;
  EXPECT_TRUE(contains(message, "unknown key")) << message;
  message = configErrorOf([] { parseConfig("data: {streams: [{? {b: 2} : 1}]}", "c.yaml"); });
  EXPECT_TRUE(contains(message, "data.streams[0].")) << message;
}

TEST(Config, ResolvedYamlRoundTrips) {
  Config c = parseConfig(
      "optim: {lr: 0.0125, schedule: linear}\ndata: {layout: series, streams: [{name: a, window: "
      "3}]}",
      "c.yaml");
  std::string yaml = configToYaml(c);
  Config again = parseConfig(yaml, "resolved.yaml");
  EXPECT_EQ(configToYaml(again), yaml);
  EXPECT_DOUBLE_EQ(again.optim.lr, 0.0125);
  EXPECT_EQ(again.optim.schedule, ScheduleKind::kLinear);
  EXPECT_EQ(again.data.streams.at(0).name, "a");
  // Every key of the schema appears in the resolved config, but the split keys of the way the
  // run does not split (Note [Splits by time]).
  for (const auto& field : configFields()) {
    std::string leaf = field.key.substr(field.key.rfind('.') + 1);
    const bool timeCut =
        leaf == "train_from" || leaf == "train_until" || leaf == "val_until" || leaf == "val_from";
    EXPECT_EQ(contains(yaml, leaf + ":"), !timeCut) << field.key;
  }
}

TEST(Config, SplitsByTimeReplaceTheFractionsAndLoadAgain) {
  const std::string file =
      "data: {split: {train_fraction: 0.7, val_fraction: 0.2, test_fraction: 0.1}}";
  Config c =
      parseConfig(file, "c.yaml", {"data.split.train_until=2024-03-01"}, ConfigOrigin::kUser);
  EXPECT_TRUE(c.data.split.byTime());
  const std::string yaml = configToYaml(c);
  EXPECT_TRUE(contains(yaml, "train_until: 2024-03-01"));
  EXPECT_FALSE(contains(yaml, "train_fraction"));
  // the resolved config loads as a user's config file again
  Config again = parseConfig(yaml, "resolved.yaml", {}, ConfigOrigin::kUser);
  EXPECT_EQ(again.data.split.trainUntil, "2024-03-01");
  // a fraction override gives the fractions back
  Config back = parseConfig(yaml, "resolved.yaml",
                            {"data.split.train_fraction=0.8", "data.split.val_fraction=0.1"},
                            ConfigOrigin::kUser);
  EXPECT_FALSE(back.data.split.byTime());
}

TEST(Config, BothWaysOfSplittingInOnePlaceAreRefused) {
  auto message = [](const std::string& text, const std::vector<std::string>& overrides) {
    try {
      parseConfig(text, "c.yaml", overrides, ConfigOrigin::kUser);
    } catch (const ConfigError& e) {
      return e.message();
    }
    return std::string("(accepted)");
  };
  EXPECT_TRUE(contains(message("data: {split: {train_until: 2024-03-01, val_fraction: 0.2}}", {}),
                       "c.yaml: data.split.train_until and data.split.val_fraction are both set"));
  EXPECT_TRUE(
      contains(message("", {"data.split.test_fraction=0.1", "data.split.val_until=2024-03-01",
                            "data.split.train_until=2024-01-01"}),
               "overrides: data.split.val_until and data.split.test_fraction are both set"));
  EXPECT_TRUE(contains(message("", {"data.split.train_until=2024-03-01T25:00"}), "time of day"));
  EXPECT_TRUE(contains(message("", {"train.init_from_optimizer=true"}),
                       "train.init_from_optimizer = true needs train.init_from"));
}

}  // namespace
}  // namespace mb
