// Where drafts come from: one interface, one implementation per strategy.
//
// The session's phases (prompt chunks, draft, verify, catch-up, commit, the prompt
// cache) call these hooks and never ask which source runs. Two implementations:
// FusedHead (mtp_llm's MtpDrafter: the head's catch-up rides in its first draft
// decode) and UpstreamHead (llama.cpp's common_speculative draft-mtp driver, for
// chained heads and checkpointed caches). A new source (grammar-forced tokens, a
// trimmed head) implements this interface; the phases stay as they are.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "counters.hpp"
#include "options.hpp"
#include "slot.hpp"

namespace mtp {

// What a source keeps beside the head's cache for one sequence, saved and restored with
// it by the prompt cache. Immutable once saved (entries may be shared).
struct DraftSnapshot {
    virtual ~DraftSnapshot() = default;
    virtual size_t bytes() const = 0;
};

class DraftSource {
public:
    virtual ~DraftSource() = default;

    // "fused" or "upstream" (Session.mtp_driver).
    virtual const char * name() const = 0;

    // The head may keep the prompt's rows for later instead of reading them now (a call
    // expected to decode plainly).
    virtual bool may_defer_prompt() const = 0;
    // The head reads every slot's rows, drafting or not (it cannot skip a sequence): it reads
    // the whole verify batch, which then carries no padding rows (padding.hpp).
    virtual bool reads_every_slot() const = 0;

    // The sequence's caches were cleared: a new conversation starts on it.
    virtual void reset(Slot & s) = 0;
    // The sequence keeps the first `n` positions of what it held (a reused prefix).
    // `h_valid`: the previous call ended exactly there with the head in step.
    virtual void keep_prefix(Slot & s, llama_pos n, bool h_valid) = 0;

    // The target decoded a prompt chunk of `s` (alone in `chunk`); `defer`: keep its rows
    // for the catch-up of the first draft instead of decoding them now.
    virtual void prompt_chunk(Slot & s, const common_batch & chunk, bool defer) = 0;
    // The prompt is fully in the target (`s.cache.tokens` holds it).
    virtual void prompt_done(Slot & s) = 0;

    // Up to `round.n_max` drafts for each slot that asks for some (n_max > 0), into
    // `round.draft_tokens`; time goes to the slot's round counters. `round.room` bounds any
    // draft (context, max_tokens, the call's longest draft); a source whose drafts cost no
    // head pass sets `round.n_forced`. `target_batch`: the target's last decode (a head
    // that lagged behind resumes from it).
    virtual void draft(const std::vector<Slot *> & slots, const common_batch & target_batch) = 0;
    // The target verified `verify_batch` and each slot's `round.ids` are set: the head
    // takes in the accepted rows (none of a slot with `round.must_restore`).
    virtual void catch_up(const std::vector<Slot *> & slots, const common_batch & verify_batch) = 0;
    // `s` committed `n_accepted` drafts (after catch_up, before its rows past them go).
    virtual void accept(Slot & s, size_t n_accepted) = 0;
    // Rows of `s` the head has queued for the catch-up of its next draft (0: it keeps none).
    virtual size_t queued_rows(const Slot & s) const = 0;
    // Rows the last draft() added to the head's decodes beside the slots' own, to keep each
    // decode one pass (the session's padding_rows counter).
    virtual size_t padding_rows() const = 0;

    virtual std::shared_ptr<const DraftSnapshot> save(const Slot & s) const = 0;
    // After the session restored the head's cache of `s` from the same entry.
    virtual void restore(Slot & s, const DraftSnapshot * snapshot) = 0;

    // A line of statistics on stderr (llama.cpp's format); `total`: the session's counters.
    virtual void print_stats(const Counters & total) const = 0;
};

// How the contexts roll a sequence back (common_context_can_seq_rm of each).
struct Rollback {
    common_context_seq_rm_type target = COMMON_CONTEXT_SEQ_RM_TYPE_PART;
    common_context_seq_rm_type head = COMMON_CONTEXT_SEQ_RM_TYPE_PART;
    bool checkpoints_target() const { return target == COMMON_CONTEXT_SEQ_RM_TYPE_FULL; }
    bool checkpoints_head() const { return head == COMMON_CONTEXT_SEQ_RM_TYPE_FULL; }
};

// The source for a target/head context pair: the fused driver where it applies and
// `opts.fuse_catch_up` allows it (with grammar-forced drafts when `opts.grammar_drafts`),
// llama.cpp's otherwise. Throws Error(MissingMtpHead) when llama.cpp cannot set its
// driver up.
std::unique_ptr<DraftSource> make_draft_source(llama_context * target, llama_context * head, Rollback rollback,
                                               const ContextOptions & opts);

// The implementations (fused_head.cpp, upstream_head.cpp, grammar_drafts.cpp).
std::unique_ptr<DraftSource> make_fused_head(llama_context * target, llama_context * head, const ContextOptions & opts);
std::unique_ptr<DraftSource> make_upstream_head(llama_context * target, llama_context * head, Rollback rollback,
                                                const ContextOptions & opts);

// `head` with grammar-forced drafts in front: where a call's grammar forces the next
// characters, they are the draft (tokenized, up to `round.room` tokens) and the head drafts
// nothing for that call in that iteration.
std::unique_ptr<DraftSource> with_grammar_drafts(std::unique_ptr<DraftSource> head, const llama_vocab * vocab);

// A failed head decode (llama.cpp's code `rc`; 2 = aborted) as the session's Error.
[[noreturn]] void head_failed(int32_t rc, const char * what);

}  // namespace mtp
