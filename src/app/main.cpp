// megabatch: distributed trainer for time-ordered data. See README.md and docs/.
#include "app/Cli.h"

int main(int argc, char** argv) {
  return mb::app::main(argc, argv);
}
