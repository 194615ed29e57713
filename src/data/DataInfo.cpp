#include "data/DataInfo.h"

namespace mb::data {

const char* toString(Split split) {
  switch (split) {
    case Split::kTrain:
      return "train";
    case Split::kVal:
      return "val";
    case Split::kTest:
      return "test";
  }
  return "?";
}

}  // namespace mb::data
