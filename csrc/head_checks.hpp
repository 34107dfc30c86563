// Whether a target and its MTP head can draft together, checked before llama.cpp sees
// the pair (it asserts on a head context over a model loaded without its head, and on
// mismatched hidden sizes).
#pragma once

#include "model.hpp"

namespace mtp {

// The model holding the MTP head for `target`: `draft` (a sidecar or another model with
// a head) when given, else the target itself. Throws Error(MissingMtpHead) or
// Error(IncompatibleDraft) saying what is missing and how to fix it.
const Model * mtp_head_for(const Model & target, const Model * draft);

}  // namespace mtp
