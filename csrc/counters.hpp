// Speculative-decoding counters: declared once (MTP_COUNTERS), generated as a
// plain struct for one iteration's deltas and as atomics readable from any
// thread while a generation runs. Derived rates live in Python (mtp_llm.stats).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace mtp {

constexpr int kMaxDraftPositions = 16;

// X(name, kind, doc). kind Sum: deltas add up; Latest: a non-zero value replaces
// the stored one (a per-generation figure).
#define MTP_COUNTERS(X)                                                                              \
    X(iters, Sum, "target verify passes (replays included)")                                        \
    X(verify_batches, Sum, "target verify decodes: one per round, shared by every running slot")      \
    X(padding_rows, Sum, "rows added to shared decodes (verify, MTP head) to keep each one pass")  \
    X(replays, Sum, "passes that re-verified tokens after a checkpoint restore")                    \
    X(drafts_generated, Sum, "draft tokens proposed (replays excluded)")                            \
    X(drafts_accepted, Sum, "draft tokens accepted (replays excluded)")                             \
    X(drafts_forced, Sum, "draft tokens the grammar forced (no head pass; in drafts_generated)")     \
    X(drafts_forced_accepted, Sum, "forced draft tokens accepted (in drafts_accepted)")             \
    X(tokens_emitted, Sum, "tokens committed to the output")                                        \
    X(tokens_undrafted, Sum, "tokens committed by passes that drafted nothing (plain decoding)")    \
    X(prompt_tokens, Sum, "prompt tokens")                                                          \
    X(prompt_tokens_cached, Sum, "prompt tokens reused from the contexts (not processed again)")   \
    X(generations, Sum, "generation calls")                                                         \
    X(t_draft_us, Sum, "MTP head: drafting and catching its KV cache up")                          \
    X(t_verify_us, Sum, "target verify passes")                                                     \
    X(t_sample_us, Sum, "target sampling and acceptance")                                           \
    X(t_ckpt_us, Sum, "checkpoint save/restore (hybrid targets)")                                   \
    X(t_total_us, Sum, "decode loop (prompt excluded)")                                             \
    X(t_prompt_us, Sum, "prompt processing")                                                        \
    X(t_first_token_us, Latest, "latest generation: its start to its first token")

enum class CounterKind { Sum, Latest };

// One set of counter values (a delta, or a snapshot of AtomicCounters).
struct Counters {
#define MTP_X(name, kind, doc) uint64_t name = 0;
    MTP_COUNTERS(MTP_X)
#undef MTP_X
    std::array<uint64_t, kMaxDraftPositions> drafted_at{};   // proposals at draft position i
    std::array<uint64_t, kMaxDraftPositions> accepted_at{};  // acceptances at draft position i
    int32_t n_draft = 0;                                      // draft length in effect (snapshots)

    // Calls f(name, value) for every scalar counter, in declaration order.
    template <class F>
    void for_each(F && f) const {
#define MTP_X(name, kind, doc) f(#name, name);
        MTP_COUNTERS(MTP_X)
#undef MTP_X
    }
};

class AtomicCounters {
public:
    void add(const Counters & d) {
        constexpr auto r = std::memory_order_relaxed;
#define MTP_X(name, kind, doc) accumulate<CounterKind::kind>(name##_, d.name);
        MTP_COUNTERS(MTP_X)
#undef MTP_X
        for (int i = 0; i < kMaxDraftPositions; ++i) {
            if (d.drafted_at[i]) drafted_at_[i].fetch_add(d.drafted_at[i], r);
            if (d.accepted_at[i]) accepted_at_[i].fetch_add(d.accepted_at[i], r);
        }
    }

    Counters snapshot(int32_t n_draft) const {
        constexpr auto r = std::memory_order_relaxed;
        Counters c;
#define MTP_X(name, kind, doc) c.name = name##_.load(r);
        MTP_COUNTERS(MTP_X)
#undef MTP_X
        for (int i = 0; i < kMaxDraftPositions; ++i) {
            c.drafted_at[i] = drafted_at_[i].load(r);
            c.accepted_at[i] = accepted_at_[i].load(r);
        }
        c.n_draft = n_draft;
        return c;
    }

    void reset() {
#define MTP_X(name, kind, doc) name##_.store(0);
        MTP_COUNTERS(MTP_X)
#undef MTP_X
        for (int i = 0; i < kMaxDraftPositions; ++i) {
            drafted_at_[i].store(0);
            accepted_at_[i].store(0);
        }
    }

private:
    template <CounterKind K>
    static void accumulate(std::atomic<uint64_t> & a, uint64_t v) {
        if (K == CounterKind::Sum) {
            a.fetch_add(v, std::memory_order_relaxed);
        } else if (v != 0) {
            a.store(v, std::memory_order_relaxed);
        }
    }

#define MTP_X(name, kind, doc) std::atomic<uint64_t> name##_{0};
    MTP_COUNTERS(MTP_X)
#undef MTP_X
    std::array<std::atomic<uint64_t>, kMaxDraftPositions> drafted_at_{}, accepted_at_{};
};

}  // namespace mtp
