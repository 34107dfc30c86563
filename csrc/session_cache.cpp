// What a new call takes from what the contexts already hold: the prefix it shares with
// the slot's conversation, or a saved state of another conversation (the prompt cache).
#include <algorithm>

#include "session.hpp"

namespace mtp {

namespace {

size_t common_prefix(const llama_tokens & held, const std::vector<int32_t> & prompt, size_t limit) {
    limit = std::min({limit, held.size(), prompt.size()});
    size_t n = 0;
    while (n < limit && held[n] == prompt[n]) {
        ++n;
    }
    return n;
}

}  // namespace

// Keeps the longest prefix the contexts share with `prompt` (all but its last token,
// which the first verify pass decodes). Returns the position prompt processing starts
// at: the reused length; 0 = nothing reused. No reused row is decoded again (its KV would
// round differently from the batch it was first decoded in, and output would part from
// plain decoding's).
size_t Session::reuse_prefix(Slot & s, const std::vector<int32_t> & prompt) {
    s.cache.reused = 0;
    if (!s.cache.valid) {
        return 0;
    }
    const size_t n = common_prefix(s.cache.tokens, prompt, prompt.size() - 1);
    // The target's cache ends exactly where the new prompt continues: nothing to remove,
    // and the last hidden state is the right one (also for recurrent state, which
    // cannot roll back). A recurrent target refuses a partial removal
    // (llama_memory_seq_rm returns false): recompute.
    const bool exact = n > 0 && n == (size_t) s.cache.n_past;
    const size_t start = n;
    if (start == 0 || !llama_memory_seq_rm(llama_get_memory(ctx_tgt_.get()), s.seq, (llama_pos) start, -1)) {
        return 0;
    }
    if (source_) {
        // A call that did not draft left the head's carried hidden state behind.
        source_->keep_prefix(s, (llama_pos) n, exact && s.call.head_followed);
    }
    s.cache.reused = start;
    return start;
}

size_t Session::usable_prefix(const llama_tokens & held, const std::vector<int32_t> & prompt) const {
    const size_t n = common_prefix(held, prompt, prompt.size() - 1);
    // Recurrent state cannot roll back: only a prompt that continues all of it counts.
    return target_rolls_back() || n == held.size() ? n : 0;
}

size_t Session::cached_prefix(const Slot & s, const std::vector<int32_t> & prompt) const {
    const bool exact = s.cache.valid && (size_t) s.cache.n_past == s.cache.tokens.size();
    return s.cache.valid && (target_rolls_back() || exact) ? usable_prefix(s.cache.tokens, prompt) : 0;
}

// Before this call cuts the slot's conversation (a prompt that shares little with it),
// the conversation is saved; a saved state that shares more with the prompt than the
// current one is restored.
void Session::pick_saved_state(Slot & s, const std::vector<int32_t> & prompt) {
    if (!saved_.enabled()) {
        return;
    }
    // Taken out first: saving the current state may evict from the cache. A target that
    // cannot roll back keeps a copy saved (the contexts will move past it).
    std::optional<PromptCache::Entry> chosen = saved_.take_best(
        [&](const llama_tokens & held) { return usable_prefix(held, prompt); }, cached_prefix(s, prompt),
        /*keep=*/!target_rolls_back());
    const size_t shared = common_prefix(s.cache.tokens, prompt, prompt.size());
    if (s.cache.valid && !s.cache.tokens.empty() && 4 * shared < 3 * s.cache.tokens.size()) {
        save_state(s);
    }
    if (chosen) {
        restore_state(s, *chosen);
    }
}

std::optional<PromptCache::Entry> Session::capture_state(Slot & s) {
    if ((size_t) s.cache.n_past != s.cache.tokens.size()) {
        // Accepted rows past the last committed token (a call that stopped mid-batch).
        if (!target_rolls_back() ||
            !llama_memory_seq_rm(llama_get_memory(ctx_tgt_.get()), s.seq, (llama_pos) s.cache.tokens.size(), -1)) {
            return std::nullopt;
        }
        s.cache.n_past = (int32_t) s.cache.tokens.size();
    }
    PromptCache::Entry st;
    st.tokens = s.cache.tokens;
    st.target.resize(llama_state_seq_get_size(ctx_tgt_.get(), s.seq));
    st.target.resize(llama_state_seq_get_data(ctx_tgt_.get(), st.target.data(), st.target.size(), s.seq));
    if (ctx_dft_) {
        st.head.resize(llama_state_seq_get_size(ctx_dft_.get(), s.seq));
        st.head.resize(llama_state_seq_get_data(ctx_dft_.get(), st.head.data(), st.head.size(), s.seq));
    }
    if (source_) {
        st.draft = source_->save(s);
    }
    return st;
}

void Session::save_state(Slot & s) {
    std::optional<PromptCache::Entry> st = capture_state(s);
    if (!st) {
        return;
    }
    // A saved state this one extends is superseded by it, where the target can roll back
    // (a recurrent one keeps the shorter state: a prompt may extend it and not this one).
    saved_.add(std::move(*st), /*supersede=*/target_rolls_back());
}

// `to` starts from `from`'s conversation (reuse_prefix then cuts it to what the prompt
// shares); `from` keeps its own. pick_slot names only a `from` whose cache is valid.
void Session::copy_state(Slot & from, Slot & to) {
    if (std::optional<PromptCache::Entry> st = capture_state(from)) {
        restore_state(to, *st);
    }
}

void Session::restore_state(Slot & s, const PromptCache::Entry & state) {
    clear_contexts(s);
    s.cache.valid = false;
    const bool ok = llama_state_seq_set_data(ctx_tgt_.get(), state.target.data(), state.target.size(), s.seq) != 0 &&
                    (!ctx_dft_ || state.head.empty() ||
                     llama_state_seq_set_data(ctx_dft_.get(), state.head.data(), state.head.size(), s.seq) != 0);
    if (!ok) {
        clear_contexts(s);
        return;
    }
    if (source_) {
        source_->restore(s, state.draft.get());
    }
    s.cache.tokens = state.tokens;
    s.cache.n_past = (int32_t) s.cache.tokens.size();
    s.cache.valid = true;
}

}  // namespace mtp
