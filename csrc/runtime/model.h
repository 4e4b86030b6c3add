// The public C++ API of the runtime (usable without Python): the Model and
// Conversation interfaces (model/model.h) and Model::load (runtime/model.cc),
// which picks the execution path and builds the model.
#pragma once
#include "model/model.h"
