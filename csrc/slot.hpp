// One generation's place in a session: sequence `seq` of the target and MTP contexts.
//
// Its state is split by lifetime: `call` lives from begin() to end(), `cache` describes
// what the contexts hold for the sequence (and outlives the call: the next one on this
// slot may reuse it), `round` is the draft/verify iteration's working state.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "counters.hpp"
#include "draft_distributions.hpp"
#include "draft_grammar.hpp"
#include "sampling.h"
#include "text.hpp"

namespace mtp {

// Drafts a grammar forces cost no head pass, so a draft may hold this many of them whatever
// the call's n_draft (which bounds the head's drafts): a verify pass then stays within the 8
// rows ggml's small-batch kernel covers (patch 0001; a 9-row pass of the built-in model cost
// 6.5 one-row passes against 4.1 for 8 rows on an Intel Xeon, `mtp-llm bench --costs`).
constexpr int32_t kMaxForcedDrafts = 7;

// A token's log-probability under the target (logprobs) and the most likely tokens' (top_logprobs).
struct TokenLogprobs {
    float logprob = 0.0f;
    std::vector<std::pair<int32_t, float>> top;  // most likely first
};

struct TokenOut {
    int32_t id;
    std::string text;  // valid UTF-8; "" while bytes are held back
    std::optional<TokenLogprobs> logprobs;  // when the call asked for them
};

struct StepResult {
    std::vector<TokenOut> tokens;
    bool finished = false;
    std::string finish_reason;  // "eog", "length", "stop"
};

struct Slot {
    explicit Slot(llama_seq_id seq) : seq(seq) {}
    const llama_seq_id seq;

    // Between begin() and end() (guarded by the session's lock, except the atomics).
    struct Call {
        bool in_use = false;
        int32_t rounds_ready = 0;  // rounds whose output the caller has not taken yet
        StepResult ready;          // their output, joined
        std::exception_ptr error;  // this generation failed in a round another caller drove
        uint64_t last_used = 0;    // begin() order, for picking a slot
        uint64_t id = 0;           // the caller's id of the running generation

        std::atomic<bool> cancel_requested{false};
        std::atomic<int64_t> deadline_us{0};
        std::atomic<int32_t> active_n_draft{0};  // longest draft of this call; read by stats readers
        bool auto_draft = false;                 // this call's lengths come from the session's controller
        bool cache_prompt = false;               // this call's cache_prompt
        bool head_follows = false;               // this call feeds the head (it may draft)
        bool head_followed = false;              // the previous call did
        bool head_defers_prompt = false;         // the head keeps the prompt's last rows instead of decoding it
        struct Observation {
            int32_t drafted, accepted;
            int64_t us, head_us;
            bool resumed;
        };
        std::optional<Observation> pending_observation;  // a drafting pass waiting for its replay

        common_sampler_ptr sampler;
        bool has_grammar = false;                // the sampler constrains the output with a grammar
        // Exact speculative sampling: drafts sampled from the head's softmax(logits / draft_temp),
        // verified by rejection against the target's sampling distribution (0: the head's argmax,
        // verified by sampling the target and comparing; both keep the target's distribution).
        float draft_temp = 0.0f;
        int32_t draft_top_k = 0;  // the target's truncation, applied to the head's distribution too
        float draft_top_p = 1.0f;
        float draft_min_p = 0.0f;
        std::mt19937_64 rng;  // the drafts' and the rejections' draws, seeded from the call's seed
        std::set<llama_token> preserved_tokens;  // emitted as text (a chat grammar's markup)
        std::vector<llama_token> prompt;         // prompt tokens still to process (all but the last)
        size_t prompt_done = 0;
        bool prompt_phase = false;
        int32_t max_tokens = 0;
        int32_t produced = 0;
        bool logprobs = false;
        int32_t top_logprobs = 0;
        float logprob_temp = 1.0f;  // the distribution logprobs are read from: logits / temp (1 when greedy)
        bool finished = false;
        int64_t t_begin_us = 0;
        bool first_token_seen = false;
        TextAssembler text;

        AtomicCounters stats;
    } call;

    // What the contexts hold for this sequence.
    struct Cache {
        bool valid = false;       // the contexts hold exactly `tokens` (a whole step completed)
        size_t reused = 0;        // prompt positions this call took from the contexts
        llama_tokens tokens;      // tokens in the target context
        llama_token id_last = 0;  // the next token to decode (sampled, not yet in the contexts)
        int32_t n_past = 0;       // positions the target holds (accepted rows included)
    } cache;

    // The draft/verify iteration: this round's, and what a replay carries to the next.
    struct Round {
        llama_tokens draft_tokens;  // drafts to verify; on a replay, the accepted tokens again
        bool replay_pending = false;
        common_prompt_checkpoint ckpt;

        bool is_replay = false;
        bool resumed = false;       // the head resumed after a plain stretch (the controller prices it)
        bool must_restore = false;  // partial acceptance on a target without in-place rollback
        int32_t room = 0;           // the longest draft there is room for (context, max_tokens, n_draft)
        int32_t forced_room = 0;    // the same for drafts the grammar forces (at least kMaxForcedDrafts)
        int32_t n_max = 0;          // the longest draft asked of the head
        int32_t n_forced = 0;       // drafts the grammar forced (no head pass): the draft's last ones
        DraftGrammar grammar;       // the call's grammar following the head's draft (when it constrains it)
        int32_t first_row = 0;      // its rows in the verify batch
        DraftDistributions draft_q;  // the head's distribution of each sampled draft (draft_temp > 0)
        std::vector<llama_token> ids;  // the target's tokens: the accepted drafts plus one
        std::vector<TokenLogprobs> logprobs;  // of each of `ids`, when the call asked
        common_sampler_ptr sampler_before;
        Counters counters;
    } round;

    bool wants_stop() const;
    // This call drafts (its longest draft is above 0), given a source to draft from.
    bool may_draft() const { return call.active_n_draft.load(std::memory_order_relaxed) > 0; }
};

}  // namespace mtp
