// Cost probe: how long llama.cpp takes for each pass of the draft/verify loop on this
// machine (`mtp-llm bench --costs`).
//
// The contexts are made as a Session makes them (same ContextOptions, the same
// draft-mtp speculation state), filled with `fill` tokens of context, and then each
// pass is timed many times, rolling the KV caches back to `fill` after every
// repetition, with the passes interleaved so that machine noise hits all alike:
//
//   target rows r = 1..n_draft+1   one target decode of r rows, every row with
//                                  logits (r = 1 is plain decoding's pass, r = k+1
//                                  the verify of k drafts)
//   sample                         one greedy sample from a row of target logits
//   head catch-up rows r = 1..n_draft+1
//                                  common_speculative_process over r verified rows:
//                                  the MTP head's KV catch-up after a verify
//   head draft passes k = 1..n_draft
//                                  common_speculative_draft of k tokens: k
//                                  sequential one-row head passes with their
//                                  top-k sampling
//   fused draft k, j accepted      mtp_llm's own driver (csrc/drafter.*, single-head
//                                  models): the draft of k tokens whose first decode
//                                  also carries the j accepted rows (its catch-up)
//
// Passes run in the order the loops run them, so that each finds the CPU caches as it
// would there: plain decoding's pass follows a one-row pass; an MTP iteration is the
// verify of k+1 rows, its samples, the head's catch-up over them and the next draft of k.
// The catch-up over fewer rows (a partial acceptance) follows a target decode of as many.
// Every time is a median over `reps` repetitions (after `warmup` unrecorded ones), in
// microseconds; the minimum is kept beside it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model.hpp"
#include "options.hpp"

namespace mtp {

struct CostTiming {
    double median_us = 0.0;
    double min_us = 0.0;
};

struct CostCurve {
    int32_t fill = 0;
    int32_t reps = 0;
    int32_t n_threads = 0;
    int32_t n_threads_batch = 0;
    std::string flash_attn;               // "on", "off", "auto"
    std::vector<CostTiming> target_rows;  // [r-1]: target decode of r rows
    CostTiming sample;                    // one greedy sample from a target row
    std::vector<CostTiming> catch_up_rows;  // [r-1]: head catch-up over r rows (empty without a head)
    std::vector<CostTiming> draft_passes;   // [k-1]: drafting k tokens (empty without a head)
    std::vector<std::vector<CostTiming>> fused;  // [k-1][j]: fused draft of k after j accepted (empty if n/a)
    std::string driver;                     // what a Session with these options uses: "fused", "upstream", "none"
};

// `draft` holds the MTP head when it is a sidecar; null = the target's own head. Without
// a head in memory (none in the file, or loaded with load_mtp=False) only the target's
// passes are timed. longest_draft(opts) sets the longest draft.
CostCurve measure_costs(const std::shared_ptr<Model> & target, const std::shared_ptr<Model> & draft,
                        const ContextOptions & opts, int32_t fill, int32_t reps, int32_t warmup);

}  // namespace mtp
