#include "session.hpp"

#include <algorithm>
#include <cstdio>

#include "errors.hpp"
#include "ggml-backend.h"
#include "llama-ext.h"  // llama_get_memory_breakdown: where a context's KV cache is
#include "log.h"
#include "runtime.hpp"

namespace mtp {

// ------------------------------------------------------------- lifetime ---

Session::Session(std::shared_ptr<Model> target, std::shared_ptr<Model> draft, const ContextOptions & opts)
    : target_(std::move(target)), draft_model_(std::move(draft)), opts_(opts),
      controller_(std::clamp(longest_draft(opts), 0, kMaxDraftPositions)) {
    validate(opts_, kMaxDraftPositions);
    check_rpc();
    if (target_->is_mtp_sidecar()) {
        fail(ErrorKind::ModelLoad, "'" + target_->path() + "' is an MTP sidecar (head only, no trunk): "
                                   "load the trunk model as the target and pass this file as draft_model");
    }
    create_contexts(longest_draft(opts_) > 0 ? check_head() : nullptr);
}

Session::~Session() = default;

const Model * Session::check_head() const {
    if (draft_model_) {
        if (!draft_model_->options().load_mtp) {
            fail(ErrorKind::MissingMtpHead, "draft_model was loaded with load_mtp=False: "
                                            "load it with Model.load(path, load_mtp=True)");
        }
        if (!draft_model_->has_mtp_head()) {
            fail(ErrorKind::MissingMtpHead, "draft_model '" + draft_model_->path() + "' has no MTP head tensors "
                                            "(pass an mtp-*.gguf sidecar or a model with an embedded head)");
        }
        require_mtp_graph(*draft_model_);
        if (draft_model_->n_embd() != target_->n_embd()) {
            fail(ErrorKind::IncompatibleDraft,
                 "draft_model hidden size " + std::to_string(draft_model_->n_embd()) + " does not match the target's " +
                 std::to_string(target_->n_embd()) + ": use the sidecar made for this target");
        }
        if (draft_model_->n_vocab() != target_->n_vocab()) {
            fail(ErrorKind::IncompatibleDraft,
                 "draft_model vocabulary size " + std::to_string(draft_model_->n_vocab()) + " does not match the target's " +
                 std::to_string(target_->n_vocab()) + ": use the sidecar made for this target");
        }
        if (draft_model_->architecture() != target_->architecture()) {
            fail(ErrorKind::IncompatibleDraft, "draft_model architecture '" + draft_model_->architecture() +
                                                   "' does not match the target's '" + target_->architecture() + "'");
        }
        return draft_model_.get();
    }
    if (target_->info().n_nextn == 0) {
        fail(ErrorKind::MissingMtpHead,
             "'" + target_->path() + "' has no MTP head: pass draft_model=Model.load('mtp-....gguf') "
             "with its sidecar head, or n_draft=0 for plain decoding");
    }
    require_mtp_graph(*target_);
    if (!target_->info().has_mtp_tensors) {
        fail(ErrorKind::MissingMtpHead,
             "'" + target_->path() + "' is a trunk-only model (its MTP head is stored in a separate "
             "mtp-*.gguf file): pass draft_model=Model.load('mtp-....gguf')");
    }
    if (!target_->options().load_mtp) {
        fail(ErrorKind::MissingMtpHead, "the target was loaded with load_mtp=False, so its MTP head is "
                                        "not in memory: load it with Model.load(path, load_mtp=True) "
                                        "or use n_draft=0");
    }
    return target_.get();
}

void Session::create_contexts(const Model * head) {
    ensure_backend();
    llama_context_params cp = to_context_params(opts_);
    flash_attn_type_ = cp.flash_attn_type;
    cp.abort_callback = &Session::abort_cb;
    cp.abort_callback_data = this;
    const int32_t n_draft = longest_draft(opts_);
    cp.n_rs_seq = head != nullptr && opts_.rollback != "checkpoint" ? (uint32_t) n_draft : 0;

    clear_log();
    ctx_tgt_.reset(llama_init_from_model(target_->get(), cp));
    if (!ctx_tgt_) {
        fail(ErrorKind::ModelLoad, with_log("llama.cpp could not create the target context (n_ctx=" +
                                            std::to_string(opts_.n_ctx) + ")"));
    }
    if ((int32_t) llama_n_batch(ctx_tgt_.get()) < n_draft + 1) {
        fail(ErrorKind::InvalidOption, "the verify batch needs n_draft + 1 = " + std::to_string(n_draft + 1) +
                                           " tokens but the context allows " +
                                           std::to_string(llama_n_batch(ctx_tgt_.get())) + ": raise n_ctx or n_batch");
    }
    seq_rm_tgt_ = common_context_can_seq_rm(ctx_tgt_.get());
    batch_ = common_batch(ctx_tgt_.get());
    accepted_batch_ = common_batch(ctx_tgt_.get());
    if (head == nullptr) {
        return;
    }

    llama_context_params dp = cp;
    dp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    dp.ctx_other = ctx_tgt_.get();
    dp.n_rs_seq = 0;
    if (head->options().mtp_device == "CPU") {
        // The head's weights are on the CPU: keep its KV cache and its ops there too.
        dp.offload_kqv = false;
        dp.op_offload = false;
    }
    clear_log();
    ctx_dft_.reset(llama_init_from_model(head->get(), dp));
    if (!ctx_dft_) {
        fail(ErrorKind::MissingMtpHead, with_log("llama.cpp could not create the MTP draft context for '" +
                                                 head->path() + "'"));
    }
    seq_rm_dft_ = common_context_can_seq_rm(ctx_dft_.get());
    head_ = head;

    if (opts_.fuse_catch_up && MtpDrafter::applies(head->get(), seq_rm_tgt_, seq_rm_dft_)) {
        drafter_ = std::make_unique<MtpDrafter>(ctx_tgt_.get(), ctx_dft_.get(), opts_.p_min);
        return;
    }
    spec_params_.types = {COMMON_SPECULATIVE_TYPE_DRAFT_MTP};
    spec_params_.draft.n_max = n_draft;
    spec_params_.draft.n_min = 0;
    spec_params_.draft.p_min = opts_.p_min;
    spec_params_.draft.ctx_tgt = ctx_tgt_.get();
    spec_params_.draft.ctx_dft = ctx_dft_.get();
    spec_.reset(common_speculative_init(spec_params_, 1));
    if (!spec_) {
        fail(ErrorKind::MissingMtpHead, with_log("llama.cpp could not initialise draft-mtp speculation"));
    }
}

int32_t Session::n_ctx() const { return (int32_t) llama_n_ctx(ctx_tgt_.get()); }

std::string Session::flash_attn() const {
    switch (flash_attn_type_) {
        case LLAMA_FLASH_ATTN_TYPE_ENABLED: return "on";
        case LLAMA_FLASH_ATTN_TYPE_DISABLED: return "off";
        default: return "auto";
    }
}

static std::vector<std::string> kv_devices(const llama_context * ctx) {
    std::vector<std::string> out;
    for (const auto & [buft, memory] : llama_get_memory_breakdown(ctx)) {
        if (memory.context > 0) {
            out.push_back(buffer_device_name(buft));
        }
    }
    return out;
}

std::map<std::string, std::vector<std::string>> Session::devices() const {
    std::map<std::string, std::vector<std::string>> out;
    auto & target = out["target"];
    const int32_t trunk = target_->head_first_block();
    target = target_->weight_devices(0, target_->info().n_nextn > 0 ? trunk : INT32_MAX, true);
    for (auto & d : kv_devices(ctx_tgt_.get())) target.push_back(d);
    sort_device_names(target);
    if (ctx_dft_ && head_ != nullptr) {
        auto & mtp = out["mtp"];
        mtp = head_->weight_devices(head_->head_first_block(), INT32_MAX, false);
        for (auto & d : kv_devices(ctx_dft_.get())) mtp.push_back(d);
        sort_device_names(mtp);
    }
    return out;
}

std::string Session::mtp_driver() const {
    return drafter_ ? "fused" : spec_ ? "upstream" : "none";
}

std::string Session::rollback_mode() const {
    if (!spec_ && !drafter_) {
        return "none";  // plain decoding never rolls back
    }
    switch (seq_rm_tgt_) {
        case COMMON_CONTEXT_SEQ_RM_TYPE_NO: return "none";
        case COMMON_CONTEXT_SEQ_RM_TYPE_PART: return "partial";
        case COMMON_CONTEXT_SEQ_RM_TYPE_FULL: return "checkpoint";
        case COMMON_CONTEXT_SEQ_RM_TYPE_RS: return "rs";
    }
    return "unknown";
}

bool Session::abort_cb(void * data) {
    auto * self = static_cast<Session *>(data);
    if (self->cancel_requested_.load(std::memory_order_relaxed)) {
        return true;
    }
    const int64_t deadline = self->deadline_us_.load(std::memory_order_relaxed);
    return deadline > 0 && now_us() > deadline;
}

void Session::check_deadline() {
    if (cancel_requested_.load()) {
        fail(ErrorKind::Cancelled, "generation was cancelled");
    }
    const int64_t deadline = deadline_us_.load();
    if (deadline > 0 && now_us() > deadline) {
        fail(ErrorKind::Timeout, "generation exceeded its timeout");
    }
}

void Session::decode_or_throw(llama_context * ctx, common_batch & batch, const char * what) {
    const int32_t rc = llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch.get());
    if (rc == 2) {
        check_deadline();
        fail(ErrorKind::Cancelled, "generation was aborted");
    }
    if (rc != 0) {
        fail(ErrorKind::Decode, with_log(std::string("llama.cpp failed to decode the ") + what +
                                         " (code " + std::to_string(rc) + ")"));
    }
}

void Session::head_failed(int32_t rc, const char * what) {
    if (rc == 2) {
        check_deadline();
        fail(ErrorKind::Cancelled, "generation was aborted");
    }
    check_deadline();
    fail(ErrorKind::Decode, with_log(std::string("the MTP head failed to ") + what + " (code " + std::to_string(rc) + ")"));
}

void Session::record(const Counters & c) {
    call_.add(c);
    total_.add(c);
}

// ----------------------------------------------------------- generation ---

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

void Session::begin(const std::vector<int32_t> & prompt, const GenerateOptions & g) {
    if (active_.exchange(true)) {
        fail(ErrorKind::Busy, "a generation is already running on this session: finish or close it first, "
                              "or use one session per concurrent generation");
    }
    try {
        check_rpc();
        validate(g, longest_draft(opts_));
        if (prompt.empty()) {
            fail(ErrorKind::InvalidPrompt, "prompt is empty: pass at least one token or a non-empty string");
        }
        target_->check_tokens(prompt);
        const int64_t need = (int64_t) prompt.size() + g.max_tokens;
        if (need > n_ctx()) {
            fail(ErrorKind::ContextOverflow,
                 "prompt (" + std::to_string(prompt.size()) + " tokens) plus max_tokens (" +
                     std::to_string(g.max_tokens) + ") exceeds n_ctx (" + std::to_string(n_ctx()) +
                     "): shorten the prompt, lower max_tokens or create the session with a larger n_ctx");
        }

        const bool has_grammar = g.sampling.grammar && !g.sampling.grammar->empty();
        clear_log();
        common_params_sampling sampling = to_common_params(g.sampling, target_->vocab());
        preserved_tokens_ = sampling.preserved_tokens;
        try {
            sampler_.reset(common_sampler_init(target_->get(), sampling));
        } catch (const std::exception & e) {
            fail(has_grammar ? ErrorKind::Grammar : ErrorKind::InvalidOption,
                 with_log(std::string("invalid sampling options: ") + e.what()));
        }
        if (!sampler_) {
            fail(ErrorKind::Grammar, with_log("the grammar does not parse (GBNF syntax error)"));
        }

        cancel_requested_.store(false);
        // Timeouts beyond ~30 years are treated as none (and cannot overflow).
        const double timeout = g.timeout.value_or(0.0);
        deadline_us_.store(timeout > 0.0 && timeout < 1e9 ? now_us() + (int64_t) (timeout * 1e6) : 0);
        const DraftLength n_draft = g.n_draft.value_or(opts_.n_draft);
        const bool has_head = spec_ || drafter_;
        auto_draft_ = has_head && is_auto(n_draft);
        active_n_draft_.store(!has_head ? 0 : auto_draft_ ? longest_draft(opts_) : std::get<int32_t>(n_draft),
                              std::memory_order_relaxed);
        // The head reads the prompt only if it is going to draft soon; otherwise it
        // keeps the last rows for the catch-up of its first draft.
        head_defers_prompt_ = auto_draft_ && controller_.expects_plain();
        pending_observation_.reset();
        controller_.interrupt();
        max_tokens_ = g.max_tokens;
        produced_ = 0;
        text_.reset(g.stop);
        draft_tokens_.clear();
        ckpt_.clear();
        replay_pending_ = false;
        finished_ = false;
        first_token_seen_ = false;

        cache_this_call_ = g.cache_prompt.value_or(opts_.cache_prompt);
        head_followed_ = head_follows_;  // whether the previous call kept the head in step
        head_follows_ = drafting();
        if (cache_this_call_) {
            pick_saved_state(prompt);
        }
        const size_t start = cache_this_call_ ? reuse_prefix(prompt) : 0;
        if (start == 0) {
            clear_contexts();
        }
        cache_valid_ = false;  // until a step completes
        prompt_.assign(prompt.begin(), prompt.end() - 1);
        prompt_done_ = start;
        for (size_t i = 0; i < start; ++i) {
            common_sampler_accept(sampler_.get(), prompt_[i], false);
        }
        id_last_ = prompt.back();
        context_tokens_.resize(start);
        context_tokens_.reserve(n_ctx());
        n_past_ = (int32_t) start;
        prompt_phase_ = true;
        call_.reset();
        Counters c;
        c.prompt_tokens = prompt.size();
        c.prompt_tokens_cached = reused_;
        c.generations = 1;
        record(c);
        t_begin_us_ = now_us();
    } catch (...) {
        sampler_.reset();
        active_.store(false);
        throw;
    }
}

void Session::clear_contexts() {
    llama_memory_clear(llama_get_memory(ctx_tgt_.get()), true);
    if (ctx_dft_) {
        llama_memory_clear(llama_get_memory(ctx_dft_.get()), true);
    }
    if (drafter_) {
        drafter_->reset();
    }
    reused_ = 0;
    head_stale_ = false;
}

// Keeps the longest prefix the contexts share with `prompt` (all but its last token,
// which the first verify pass decodes). Returns the position prompt processing starts
// at: the reused length, or one less where the target decodes the last reused token
// again for the hidden state the head pairs with the next row; 0 = nothing reused.
size_t Session::reuse_prefix(const std::vector<int32_t> & prompt) {
    reused_ = 0;
    if (!cache_valid_) {
        return 0;
    }
    const size_t n = common_prefix(context_tokens_, prompt, prompt.size() - 1);
    // The target's cache ends exactly where the new prompt continues: nothing to remove,
    // and the last hidden state is the right one (also for recurrent state, which
    // cannot roll back). Otherwise the tail goes, and the fused driver's head needs one
    // token decoded again for the hidden state it pairs with the next row. A recurrent
    // target refuses a partial removal (llama_memory_seq_rm returns false): recompute.
    const bool exact = n > 0 && n == (size_t) n_past_;
    const size_t start = exact || !drafter_ ? n : n > 1 ? n - 1 : 0;
    if (start == 0 || !llama_memory_seq_rm(llama_get_memory(ctx_tgt_.get()), 0, (llama_pos) start, -1)) {
        return 0;
    }
    if (drafter_) {
        // A call that did not draft left the head's carried hidden state behind.
        drafter_->keep_prefix((llama_pos) n, exact && head_followed_);
    } else if (spec_) {
        // llama.cpp's driver keeps its own carry-over state: start its head afresh when it drafts.
        llama_memory_seq_rm(llama_get_memory(ctx_dft_.get()), 0, -1, -1);
        head_stale_ = true;
    }
    reused_ = start;
    return start;
}

size_t Session::usable_prefix(const llama_tokens & held, const std::vector<int32_t> & prompt) const {
    const size_t n = common_prefix(held, prompt, prompt.size() - 1);
    // Recurrent state cannot roll back: only a prompt that continues all of it counts.
    return target_rolls_back() || n == held.size() ? n : 0;
}

// Before this call cuts the current conversation (a prompt that shares little with it),
// the current state is saved; a saved state that shares more with the prompt than the
// current one is restored.
void Session::pick_saved_state(const std::vector<int32_t> & prompt) {
    if (opts_.cache_size_mb <= 0.0) {
        return;
    }
    const bool current_exact = cache_valid_ && (size_t) n_past_ == context_tokens_.size();
    const size_t current = cache_valid_ && (target_rolls_back() || current_exact) ? usable_prefix(context_tokens_, prompt) : 0;
    auto best = saved_.end();
    size_t best_n = current;
    for (auto it = saved_.begin(); it != saved_.end(); ++it) {
        if (const size_t n = usable_prefix(it->tokens, prompt); n > best_n) {
            best = it;
            best_n = n;
        }
    }
    const size_t shared = common_prefix(context_tokens_, prompt, prompt.size());
    // Take the chosen state out first: saving the current one may evict from the list. A
    // target that cannot roll back keeps a copy saved (the contexts will move past it).
    std::list<SavedState> chosen;
    if (best != saved_.end()) {
        if (target_rolls_back()) {
            saved_bytes_ -= best->bytes();
            chosen.splice(chosen.begin(), saved_, best);
        } else {
            chosen.push_back(*best);
            saved_.splice(saved_.begin(), saved_, best);  // most recently used
        }
    }
    if (cache_valid_ && !context_tokens_.empty() && 4 * shared < 3 * context_tokens_.size()) {
        save_state();
    }
    if (!chosen.empty()) {
        restore_state(chosen.front());
    }
}

void Session::save_state() {
    if ((size_t) n_past_ != context_tokens_.size()) {
        // Accepted rows past the last committed token (a call that stopped mid-batch).
        if (!target_rolls_back() ||
            !llama_memory_seq_rm(llama_get_memory(ctx_tgt_.get()), 0, (llama_pos) context_tokens_.size(), -1)) {
            return;
        }
        n_past_ = (int32_t) context_tokens_.size();
    }
    SavedState s;
    s.tokens = context_tokens_;
    s.target.resize(llama_state_seq_get_size(ctx_tgt_.get(), 0));
    s.target.resize(llama_state_seq_get_data(ctx_tgt_.get(), s.target.data(), s.target.size(), 0));
    if (ctx_dft_) {
        s.head.resize(llama_state_seq_get_size(ctx_dft_.get(), 0));
        s.head.resize(llama_state_seq_get_data(ctx_dft_.get(), s.head.data(), s.head.size(), 0));
    }
    if (drafter_) {
        s.drafter = drafter_->snapshot();
    }
    const uint64_t budget = (uint64_t) (opts_.cache_size_mb * 1024.0 * 1024.0);
    if (s.target.empty() || s.bytes() > budget) {
        return;
    }
    // A saved state this one extends is superseded by it, where the target can roll back
    // (a recurrent one keeps the shorter state: a prompt may extend it and not this one).
    for (auto it = saved_.begin(); it != saved_.end();) {
        const bool prefix = target_rolls_back() && it->tokens.size() <= s.tokens.size() &&
                            std::equal(it->tokens.begin(), it->tokens.end(), s.tokens.begin());
        if (prefix) {
            saved_bytes_ -= it->bytes();
            it = saved_.erase(it);
        } else {
            ++it;
        }
    }
    saved_bytes_ += s.bytes();
    saved_.push_front(std::move(s));
    while (saved_bytes_.load() > budget && !saved_.empty()) {
        saved_bytes_ -= saved_.back().bytes();
        saved_.pop_back();
    }
}

void Session::restore_state(const SavedState & state) {
    clear_contexts();
    cache_valid_ = false;
    const bool ok = llama_state_seq_set_data(ctx_tgt_.get(), state.target.data(), state.target.size(), 0) != 0 &&
                    (!ctx_dft_ || state.head.empty() ||
                     llama_state_seq_set_data(ctx_dft_.get(), state.head.data(), state.head.size(), 0) != 0);
    if (!ok) {
        clear_contexts();
        return;
    }
    if (drafter_) {
        drafter_->restore(state.drafter);
    } else if (spec_) {
        llama_memory_seq_rm(llama_get_memory(ctx_dft_.get()), 0, -1, -1);
        head_stale_ = true;
    }
    context_tokens_ = state.tokens;
    n_past_ = (int32_t) context_tokens_.size();
    cache_valid_ = true;
}

void Session::end() {
    sampler_.reset();
    deadline_us_.store(0);
    cancel_requested_.store(false);
    active_.store(false);
}

void Session::check_rpc() const {
    target_->check_rpc();
    if (draft_model_) {
        draft_model_->check_rpc();
    }
}

StepResult Session::step() {
    if (!active_.load()) {
        fail(ErrorKind::Busy, "no generation is running: call begin() first");
    }
    // A server lost during the step shows as a decode error or as zeroed tensors: both become
    // Error(RpcLost) here, before any token computed from them is returned.
    check_rpc();
    StepResult out;
    try {
        out = step_once();
    } catch (const Error &) {
        check_rpc();
        throw;
    }
    check_rpc();
    return out;
}

StepResult Session::step_once() {
    StepResult out;
    if (finished_) {
        out.finished = true;
        return out;
    }
    check_deadline();
    cache_valid_ = false;  // the contexts hold what context_tokens_ says only after a whole step
    if (prompt_phase_) {
        process_prompt_chunk();
        cache_valid_ = !prompt_phase_;
        return out;
    }
    speculative_iteration(out);
    cache_valid_ = true;
    return out;
}

void Session::process_prompt_chunk() {
    Counters c;
    {
        ScopedTimer timer(c.t_prompt_us);
        const size_t n = std::min(prompt_.size() - prompt_done_, (size_t) llama_n_batch(ctx_tgt_.get()));
        if (n > 0) {
            batch_.clear();
            for (size_t i = 0; i < n; ++i) {
                batch_.add(prompt_[prompt_done_ + i], (llama_pos) (prompt_done_ + i), 0, false);
            }
            decode_or_throw(ctx_tgt_.get(), batch_, "prompt");
            if (drafting()) {
                if (drafter_ && head_defers_prompt_) {
                    drafter_->defer_prompt(batch_);
                } else if (drafter_) {
                    if (const int32_t rc = drafter_->process_prompt(batch_); rc != 0) {
                        head_failed(rc, "process the prompt");
                    }
                } else if (head_defers_prompt_ || head_stale_) {
                    head_stale_ = true;
                } else if (!common_speculative_process(spec_.get(), batch_)) {
                    head_failed(-1, "process the prompt");
                }
            }
            for (size_t i = 0; i < n; ++i) {
                common_sampler_accept(sampler_.get(), prompt_[prompt_done_ + i], false);
            }
            prompt_done_ += n;
        }
        if (prompt_done_ == prompt_.size()) {
            context_tokens_.assign(prompt_.begin(), prompt_.end());
            n_past_ = (int32_t) prompt_.size();
            if (cache_this_call_ && !target_rolls_back() && opts_.cache_size_mb > 0.0 && !prompt_.empty()) {
                // Recurrent state cannot roll back to here after generating: a checkpoint
                // where the prompt ends lets the next turn, which extends it, reuse it.
                save_state();
            }
            if (drafting() && spec_ && !head_stale_) {
                common_speculative_begin(spec_.get(), 0, context_tokens_);
            }
            prompt_phase_ = false;
        }
    }
    record(c);
}

// ------------------------------------------------- draft/verify iteration ---
//
// draft -> verify -> accept -> catch up the head -> commit, or, on a partial
// acceptance of a target that cannot roll back in place, restore the checkpoint
// and re-verify the accepted tokens next step (a replay).

void Session::speculative_iteration(StepResult & out) {
    Counters c;
    {
        ScopedTimer timer(c.t_total_us);
        const int64_t t_start = now_us();
        const bool is_replay = replay_pending_;
        replay_pending_ = false;
        bool resumed = false;
        if (!is_replay) {
            draft(c, resumed);
        }
        verify(c);
        c.iters = 1;
        common_sampler_ptr sampler_before;
        std::vector<llama_token> ids = accept(sampler_before, c);
        const size_t n_draft = draft_tokens_.size();
        const size_t n_accepted = ids.size() - 1;
        const bool must_restore = checkpoints_target() && n_accepted < n_draft;
        if (drafting() && !must_restore) {
            catch_up_head(n_accepted, c);
        }
        if (is_replay) {
            c.replays = 1;
        } else {
            c.drafts_generated = n_draft;
            c.drafts_accepted = n_accepted;
            for (size_t i = 0; i < n_draft && i < (size_t) kMaxDraftPositions; ++i) {
                c.drafted_at[i] = 1;
                c.accepted_at[i] = i < n_accepted ? 1 : 0;
            }
        }
        if (must_restore) {
            restore_checkpoint(std::move(ids), std::move(sampler_before), c);
        } else {
            commit(ids, n_accepted, out, c);
            if (!is_replay && n_draft == 0) {
                c.tokens_undrafted = c.tokens_emitted;
            }
        }
        if (drafting()) {
            // The controller sees each drafting pass with its replay (the cost of a
            // partial acceptance on a checkpointed target) as one iteration.
            const int64_t us = now_us() - t_start;
            if (!is_replay) {
                pending_observation_ = Observation{(int32_t) n_draft, (int32_t) n_accepted, us,
                                                   (int64_t) c.t_draft_us, resumed};
            } else if (pending_observation_) {
                pending_observation_->us += us;
                pending_observation_->head_us += (int64_t) c.t_draft_us;
            }
            if (!must_restore && pending_observation_) {
                const Observation & o = *pending_observation_;
                controller_.observe(o.drafted, o.accepted, o.us, o.head_us, o.resumed);
                pending_observation_.reset();
            }
        }
    }
    record(c);
}

int32_t Session::draft_room() const {
    return std::max(0, std::min({n_ctx() - n_past_ - 2, max_tokens_ - produced_ - 1,
                                 active_n_draft_.load(std::memory_order_relaxed)}));
}

// Proposes up to the chosen number of tokens with the MTP head (checkpointing a
// target that cannot roll back in place first). `resumed`: the head first caught
// up on a plain stretch.
void Session::draft(Counters & c, bool & resumed) {
    draft_tokens_.clear();
    if (!drafting()) {
        return;
    }
    const int32_t room = draft_room();
    const int32_t n_max = auto_draft_ ? controller_.choose(room) : room;
    if (n_max == 0) {
        return;  // plain decoding this iteration: nothing to draft, checkpoint or roll back
    }
    if (drafter_) {
        ScopedTimer timer(c.t_draft_us);
        resumed = drafter_->pending_rows() > (size_t) longest_draft(opts_) + 1;
        if (const int32_t rc = drafter_->draft(id_last_, n_past_, n_max, draft_tokens_); rc != 0) {
            head_failed(rc, "draft");
        }
        return;
    }
    if (head_stale_) {
        ScopedTimer timer(c.t_draft_us);
        resume_upstream_head();
        resumed = true;
    }
    llama_context * ctx_tgt = ctx_tgt_.get();
    llama_context * ctx_dft = ctx_dft_.get();
    // Checkpoint work is timed apart only where checkpoints exist.
    uint64_t & ckpt_bucket = checkpoints_target() || checkpoints_head() ? c.t_ckpt_us : c.t_draft_us;
    {
        ScopedTimer timer(ckpt_bucket);
        ckpt_.update_pos((int64_t) context_tokens_.size(),
                         llama_memory_seq_pos_min(llama_get_memory(ctx_tgt), 0),
                         llama_memory_seq_pos_max(llama_get_memory(ctx_tgt), 0));
        if (checkpoints_head()) {
            ckpt_.update_dft(ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        }
    }
    {
        ScopedTimer timer(c.t_draft_us);
        common_speculative_draft_params & dp = common_speculative_get_draft_params(spec_.get(), 0);
        dp.drafting = true;
        dp.n_max = n_max;
        dp.pos0 = n_past_;
        dp.id_last = id_last_;
        dp.prompt = &context_tokens_;
        dp.result = &draft_tokens_;
        common_speculative_draft(spec_.get());
        if ((int32_t) draft_tokens_.size() > n_max) {
            draft_tokens_.resize(n_max);
        }
    }
    {
        ScopedTimer timer(ckpt_bucket);
        if (!draft_tokens_.empty() && checkpoints_target()) {
            ckpt_.update_tgt(ctx_tgt, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        }
        if (checkpoints_head()) {
            ckpt_.load_dft(ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        }
        llama_memory_seq_rm(llama_get_memory(ctx_dft), 0, ckpt_.pos_max + 1, -1);
    }
}

// llama.cpp's driver skipped the head's catch-up while the target decoded alone:
// its cache has a gap it cannot decode across. Start it afresh from the target's
// last decode (batch_ and its hidden states), so it can draft from here.
void Session::resume_upstream_head() {
    llama_memory_seq_rm(llama_get_memory(ctx_dft_.get()), 0, -1, -1);
    if (!common_speculative_process(spec_.get(), batch_)) {
        head_failed(-1, "catch up after plain decoding");
    }
    head_stale_ = false;
}

// Runs the target on [id_last, drafts...].
void Session::verify(Counters & c) {
    ScopedTimer timer(c.t_verify_us);
    batch_.clear();
    batch_.add(id_last_, n_past_, 0, true);
    for (size_t i = 0; i < draft_tokens_.size(); ++i) {
        batch_.add(draft_tokens_[i], n_past_ + 1 + (llama_pos) i, 0, true);
    }
    decode_or_throw(ctx_tgt_.get(), batch_, "verify batch");
}

// Samples the target's tokens along the drafts: the accepted drafts plus one
// token of the target's own. `sampler_before` keeps the sampler state for a
// checkpoint restore.
std::vector<llama_token> Session::accept(common_sampler_ptr & sampler_before, Counters & c) {
    ScopedTimer timer(c.t_sample_us);
    if (checkpoints_target() && !draft_tokens_.empty()) {
        sampler_before.reset(common_sampler_clone(sampler_.get()));
    }
    return common_sampler_sample_and_accept_n(sampler_.get(), ctx_tgt_.get(), draft_tokens_);
}

// The head catches up on [id_last, accepted drafts] only: rows past the first
// rejection would be trimmed from its cache right after.
void Session::catch_up_head(size_t n_accepted, Counters & c) {
    ScopedTimer timer(c.t_draft_us);
    if (drafter_) {
        drafter_->accept(batch_, n_accepted);  // decoded with the next draft's first step
        return;
    }
    if (draft_tokens_.empty() || head_stale_) {
        head_stale_ = true;  // caught up only when drafting resumes (resume_upstream_head)
        return;
    }
    const common_batch * rows = &batch_;
    if (n_accepted < draft_tokens_.size()) {
        accepted_batch_.clear();
        for (size_t i = 0; i <= n_accepted; ++i) {
            accepted_batch_.add(batch_.tokens[i].id, batch_.tokens[i].pos[0], 0, true);
        }
        rows = &accepted_batch_;
    }
    if (!common_speculative_process(spec_.get(), *rows)) {
        head_failed(-1, "process the verify batch");
    }
}

// Partial acceptance without in-place rollback: back to the checkpoint, and the
// accepted tokens are verified again next step as a replay (not new drafts).
void Session::restore_checkpoint(std::vector<llama_token> ids, common_sampler_ptr sampler_before, Counters & c) {
    ScopedTimer timer(c.t_ckpt_us);
    llama_context * ctx_dft = ctx_dft_.get();
    draft_tokens_ = std::move(ids);
    ckpt_.load_tgt(ctx_tgt_.get(), 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    llama_memory_seq_rm(llama_get_memory(ctx_tgt_.get()), 0, ckpt_.pos_max + 1, -1);
    if (ctx_dft) {
        ckpt_.load_dft(ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        llama_memory_seq_rm(llama_get_memory(ctx_dft), 0, ckpt_.pos_max + 1, -1);
    }
    context_tokens_.resize(ckpt_.n_tokens);
    sampler_ = std::move(sampler_before);
    n_past_ = (int32_t) context_tokens_.size();
    replay_pending_ = true;
}

// Keeps the accepted tokens in both caches, drops the rejected rows, and emits
// the committed tokens.
void Session::commit(const std::vector<llama_token> & ids, size_t n_accepted, StepResult & out, Counters & c) {
    if (drafting() && spec_ && !head_stale_) {
        common_speculative_accept(spec_.get(), 0, (uint16_t) n_accepted);
    }
    n_past_ += (int32_t) ids.size();
    draft_tokens_.clear();
    llama_memory_seq_rm(llama_get_memory(ctx_tgt_.get()), 0, n_past_, -1);
    if (ctx_dft_) {
        llama_memory_seq_rm(llama_get_memory(ctx_dft_.get()), 0, n_past_, -1);
    }
    const size_t before = out.tokens.size();
    commit_tokens(ids, out);
    c.tokens_emitted = out.tokens.size() - before;
    if (!first_token_seen_ && !out.tokens.empty()) {
        first_token_seen_ = true;
        c.t_first_token_us = (uint64_t) (now_us() - t_begin_us_);
    }
}

void Session::commit_tokens(const std::vector<llama_token> & ids, StepResult & out) {
    for (llama_token id : ids) {
        context_tokens_.push_back(id_last_);
        id_last_ = id;
        if (target_->is_eog(id)) {
            out.tokens.push_back({id, ""});
            finish(out, "eog");
            return;
        }
        bool stopped = false;
        const bool special = preserved_tokens_.count(id) > 0;  // chat markup the parser reads
        std::string text = text_.push(common_token_to_piece(ctx_tgt_.get(), id, special), stopped);
        out.tokens.push_back({id, std::move(text)});
        ++produced_;
        if (stopped) {
            finish(out, "stop");
            return;
        }
        if (produced_ >= max_tokens_) {
            finish(out, "length");
            return;
        }
    }
}

void Session::finish(StepResult & out, const std::string & reason) {
    if (reason != "stop") {
        std::string rest = text_.flush();
        if (!rest.empty() && !out.tokens.empty()) {
            out.tokens.back().text += rest;
        }
    }
    finished_ = true;
    out.finished = true;
    out.finish_reason = reason;
}

void Session::print_stats() const {
    if (drafter_) {
        // common_speculative's line, from the engine's own counters.
        const Counters c = total_.snapshot(longest_draft(opts_));
        const uint64_t passes = c.iters - c.replays;
        std::fprintf(stderr, "draft-mtp (mtp_llm fused driver): #verify passes = %llu, #gen drafts = %llu, "
                             "#acc drafts = %llu, mean acc len = %.2f\n",
                     (unsigned long long) passes, (unsigned long long) c.drafts_generated,
                     (unsigned long long) c.drafts_accepted,
                     passes ? 1.0 + (double) c.drafts_accepted / (double) passes : 0.0);
        std::fflush(stderr);
        return;
    }
    if (!spec_) {
        return;
    }
    const int thold = common_log_get_verbosity_thold();
    common_log_set_verbosity_thold(LOG_LEVEL_TRACE);
    common_speculative_print_stats(spec_.get());
    common_log_flush(common_log_main());
    common_log_set_verbosity_thold(thold);
    std::fflush(stdout);
    std::fflush(stderr);
}

}  // namespace mtp
