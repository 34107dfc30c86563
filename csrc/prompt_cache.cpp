#include "prompt_cache.hpp"

#include <algorithm>

namespace mtp {

size_t PromptCache::Entry::bytes() const {
    return tokens.size() * sizeof(llama_token) + target.size() + head.size() + (draft ? draft->bytes() : 0);
}

std::optional<PromptCache::Entry> PromptCache::take_best(const std::function<size_t(const llama_tokens &)> & usable,
                                                         size_t at_least, bool keep) {
    auto best = entries_.end();
    size_t best_n = at_least;
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (const size_t n = usable(it->tokens); n > best_n) {
            best = it;
            best_n = n;
        }
    }
    if (best == entries_.end()) {
        return std::nullopt;
    }
    if (keep) {
        entries_.splice(entries_.begin(), entries_, best);  // most recently used
        return entries_.front();
    }
    bytes_ -= best->bytes();
    Entry out = std::move(*best);
    entries_.erase(best);
    return out;
}

void PromptCache::add(Entry entry, bool supersede) {
    if (entry.target.empty() || entry.bytes() > budget_) {
        return;
    }
    if (supersede) {
        for (auto it = entries_.begin(); it != entries_.end();) {
            const bool prefix = it->tokens.size() <= entry.tokens.size() &&
                                std::equal(it->tokens.begin(), it->tokens.end(), entry.tokens.begin());
            if (prefix) {
                bytes_ -= it->bytes();
                it = entries_.erase(it);
            } else {
                ++it;
            }
        }
    }
    bytes_ += entry.bytes();
    entries_.push_front(std::move(entry));
    while (bytes_.load() > budget_ && !entries_.empty()) {
        bytes_ -= entries_.back().bytes();
        entries_.pop_back();
    }
}

}  // namespace mtp
