#pragma once
// Error agreement: one rank's failure ends every rank with that rank's message.
//
// Every fallible phase (reading the config, validating and loading data, loading a
// checkpoint) runs inside agreed(). Each rank runs the body; then all ranks exchange a fixed
// size record {ok, exit code, message}. If any rank failed, every rank throws the same
// mb::Error (the lowest failing rank's, prefixed with "rank R:"), so all ranks print the same
// message and exit with the same code. No rank is left waiting in a later collective.
#include <functional>
#include <string>

#include "common/Error.h"
#include "dist/Communicator.h"

namespace mb::dist {

// Collective: all ranks must call it. Throws the agreed error if any rank reported one.
void agree(Communicator& comm, const Error* localError, const std::string& phase);

// Runs `body`, converting exceptions into an agreed error for every rank.
void agreed(Communicator& comm, const std::string& phase, const std::function<void()>& body);

}  // namespace mb::dist
