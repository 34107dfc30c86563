// Saved states of other conversations: what the contexts held for a sequence, kept so a
// later prompt that continues one of them skips its prefix. Least recently used first to
// go, bounded by a byte budget (ContextOptions.cache_size_mb).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <vector>

#include "common.h"
#include "draft_source.hpp"

namespace mtp {

class PromptCache {
public:
    struct Entry {
        llama_tokens tokens;                 // what the contexts held: exactly these positions
        std::vector<uint8_t> target, head;   // the sequence's state in each context
        std::shared_ptr<const DraftSnapshot> draft;  // the draft source's own state, if any
        size_t bytes() const;
    };

    explicit PromptCache(double size_mb) : budget_(size_mb > 0.0 ? (uint64_t) (size_mb * 1024.0 * 1024.0) : 0) {}

    bool enabled() const { return budget_ > 0; }
    uint64_t bytes() const { return bytes_.load(); }  // safe from any thread

    // The entry whose `usable(tokens)` is largest and above `at_least`, or none. `keep`: a
    // copy is returned and the entry stays (as the most recently used); else it is taken out.
    std::optional<Entry> take_best(const std::function<size_t(const llama_tokens &)> & usable, size_t at_least,
                                   bool keep);
    // Adds `entry` if it fits the budget, evicting the least recently used as needed.
    // `supersede`: entries it extends (their tokens are a prefix of its) go.
    void add(Entry entry, bool supersede);

private:
    uint64_t budget_;
    std::list<Entry> entries_;  // most recent first
    std::atomic<uint64_t> bytes_{0};
};

}  // namespace mtp
