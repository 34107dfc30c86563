#include "draft_grammar.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "llama-ext.h"

namespace mtp {

namespace {

// What is remembered (each a bound, not a budget): tokens after one token, punctuation tokens,
// and preceding tokens (all forgotten past it).
constexpr size_t kRememberedAfter = 8;
constexpr size_t kRememberedPunctuation = 16;
constexpr size_t kRememberedPrevs = 4096;

bool spells_at(const std::string & text, size_t pos, const std::string & piece) {
    return !piece.empty() && pos + piece.size() <= text.size() && text.compare(pos, piece.size(), piece) == 0;
}

bool is_punctuation(const std::string & piece) {
    return !piece.empty() && std::none_of(piece.begin(), piece.end(), [](unsigned char c) {
        return std::isalnum(c) || std::isspace(c) || c >= 0x80;
    });
}

}  // namespace

const std::string & ForcedTokenizer::piece(llama_token id) {
    auto it = pieces_.find(id);
    if (it == pieces_.end()) {
        it = pieces_.emplace(id, common_token_to_piece(vocab_, id, /*special=*/false)).first;
    }
    return it->second;
}

llama_token ForcedTokenizer::remembered(llama_token prev, const std::string & text, size_t pos) {
    if (const auto it = after_.find(prev); it != after_.end()) {
        for (const llama_token id : it->second) {
            if (spells_at(text, pos, piece(id))) {
                return id;
            }
        }
    }
    llama_token longest = -1;
    for (const llama_token id : punctuation_) {
        if (spells_at(text, pos, piece(id)) && (longest < 0 || piece(id).size() > piece(longest).size())) {
            longest = id;
        }
    }
    return longest;
}

void ForcedTokenizer::remember(llama_token prev, llama_token id, bool instead) {
    if (after_.size() >= kRememberedPrevs && !after_.count(prev)) {
        after_.clear();
    }
    const auto latest_first = [id](std::vector<llama_token> & list, size_t bound) {
        list.erase(std::remove(list.begin(), list.end(), id), list.end());
        list.insert(list.begin(), id);
        if (list.size() > bound) {
            list.pop_back();
        }
    };
    latest_first(after_[prev], kRememberedAfter);
    if (instead && is_punctuation(piece(id))) {
        latest_first(punctuation_, kRememberedPunctuation);
    }
}

size_t ForcedTokenizer::tokenize(const std::string & text, llama_token prev, size_t max_tokens,
                                 std::vector<llama_token> & out) {
    const size_t before = out.size();
    size_t pos = 0;
    size_t next = 0;  // the tokenizer's tokens of text[from..]: next is the one at pos
    size_t from = std::string::npos;
    while (pos < text.size() && out.size() - before < max_tokens) {
        llama_token id = remembered(prev, text, pos);
        if (id < 0) {
            if (from != pos) {
                tokens_ = common_tokenize(vocab_, text.substr(pos), /*add_special=*/false, /*parse_special=*/false);
                next = 0;
                from = pos;
            }
            if (next >= tokens_.size()) {
                break;
            }
            id = tokens_[next++];
            if (!spells_at(text, pos, piece(id))) {
                // A tokenizer that does not spell text piece by piece (a leading space added):
                // its own tokens, as they are.
                for (--next; next < tokens_.size() && out.size() - before < max_tokens; ++next) {
                    out.push_back(tokens_[next]);
                }
                break;
            }
            from += piece(id).size();
        }
        out.push_back(id);
        pos += piece(id).size();
        prev = id;
    }
    return out.size() - before;
}

void ForcedTokenizer::learn(llama_token prev, const std::vector<llama_token> & drafted, size_t n_forced,
                            const std::vector<llama_token> & ids) {
    // ids[i] (accepted drafts, then the target's own token) was written where forced draft i
    // stood: inside forced text. A token after the last draft may lie past it.
    const size_t first = drafted.size() - std::min(n_forced, drafted.size());
    const size_t end = std::min(ids.size(), drafted.size());
    for (size_t i = first; i < end; ++i) {
        remember(i > 0 ? ids[i - 1] : prev, ids[i], ids[i] != drafted[i]);
    }
}

bool DraftGrammar::reset(common_sampler * sampler, ForcedTokenizer * tokenizer, llama_token prev) {
    grammar_.reset(common_sampler_grammar_clone(sampler));
    tokenizer_ = tokenizer;
    prev_ = prev;
    return grammar_ != nullptr;
}

bool DraftGrammar::allows(llama_token id) {
    llama_token_data one = {id, 0.0f, 0.0f};
    llama_token_data_array arr = {&one, 1, -1, false};
    llama_sampler_apply(grammar_.get(), &arr);
    return std::isfinite(one.logit);
}

llama_token DraftGrammar::best_allowed(const float * logits, int32_t n_vocab) {
    const llama_token argmax = (llama_token) (std::max_element(logits, logits + n_vocab) - logits);
    if (allows(argmax)) {
        return argmax;
    }
    // The head's next best candidates (a trimmed head scores only its own ids: the rest are -inf).
    top_.clear();
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (logits[i] > -INFINITY) {
            top_.push_back({i, logits[i], 0.0f});
        }
    }
    // Where they are few, all of them are checked at once (as cheap as a few of a large
    // vocabulary); otherwise only the best kCandidates, and none allowed ends the draft.
    const size_t k = top_.size() <= (size_t) kFullCheck ? top_.size() : std::min(top_.size(), (size_t) kCandidates);
    std::partial_sort(top_.begin(), top_.begin() + (ptrdiff_t) k, top_.end(),
                      [](const llama_token_data & a, const llama_token_data & b) { return a.logit > b.logit; });
    top_.resize(k);
    llama_token_data_array arr = {top_.data(), k, -1, true};
    llama_sampler_apply(grammar_.get(), &arr);
    for (const llama_token_data & c : top_) {  // still in order: the grammar only masks
        if (c.logit > -INFINITY) {
            return c.id;
        }
    }
    return -1;
}

void DraftGrammar::accept(llama_token id) {
    llama_sampler_accept(grammar_.get(), id);
}

size_t DraftGrammar::append_forced(size_t max_tokens, std::vector<llama_token> & out) {
    if (max_tokens == 0) {
        return 0;
    }
    const std::string text = llama_sampler_grammar_forced_text(grammar_.get(), kMaxForcedBytes);
    return text.empty() ? 0 : tokenizer_->tokenize(text, out.empty() ? prev_ : out.back(), max_tokens, out);
}

}  // namespace mtp
