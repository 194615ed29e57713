#pragma once
// megabatch plot draws with Python and matplotlib (Debian's python3-matplotlib): a run's
// training curves (PlotCommand.cpp), or a predictions file (PredictionPlot.cpp).
#include <string>
#include <vector>

namespace mb::app {

// The Python that draws: MEGABATCH_PYTHON, else /usr/bin/python3, else python3 on PATH.
std::string pythonInterpreter();
// Runs argv (its program first) and waits; its exit status (127: it could not start).
int runProcess(const std::vector<std::string>& args);

// Draws the file `path` that megabatch predict wrote to the PNG `out`. Throws DataError (exit 3)
// for a file that is not one or cannot be drawn, RuntimeError without matplotlib or h5py.
void plotPredictions(const std::string& path, const std::string& out);

}  // namespace mb::app
