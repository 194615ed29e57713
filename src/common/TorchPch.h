#pragma once
// Precompiled header for megabatch_core (MEGABATCH_PCH=ON). Sources still include exactly the
// headers they use; this file only makes the heavy LibTorch headers cost once per build.
#include <ATen/ATen.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>
#include <torch/optim/adamw.h>
#include <yaml-cpp/yaml.h>
