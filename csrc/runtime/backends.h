// Backend selection: the chain of backends a model dispatches through.
#pragma once
#include <memory>
#include <vector>

#include "dispatch/backend.h"
#include "runtime/model.h"

namespace cyb {

// Platform default (no name): wgpu+rs on a hardware adapter when built, else cpu.
// A named backend comes first and the cpu backend always ends the chain.
// Throws BackendInit when the named backend cannot run here. Backends created
// for this model (wgpu+rs holds the model's device weights) are handed to `owned`;
// the model keeps them alive (Dispatcher::adopt).
std::vector<Backend*> select_backends(const LoadOptions& opts, std::vector<std::unique_ptr<Backend>>* owned);

}  // namespace cyb
