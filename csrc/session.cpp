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
    for (int32_t i = 0; i < opts_.n_parallel; ++i) {
        slots_.push_back(std::make_unique<Slot>((llama_seq_id) i));
    }
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

    n_threads_ = cp.n_threads;
    n_threads_batch_ = cp.n_threads_batch;
    ComputeThreads threads(n_threads_, n_threads_batch_);  // for the probing decodes below
    clear_log();
    ctx_tgt_.reset(llama_init_from_model(target_->get(), cp));
    if (!ctx_tgt_) {
        fail(ErrorKind::ModelLoad, with_log("llama.cpp could not create the target context (n_ctx=" +
                                            std::to_string(opts_.n_ctx) + ")"));
    }
    threads.attach(ctx_tgt_.get());
    if ((int32_t) llama_n_batch(ctx_tgt_.get()) < opts_.n_parallel * (n_draft + 1)) {
        fail(ErrorKind::InvalidOption, "the verify batch needs n_parallel * (n_draft + 1) = " +
                                           std::to_string(opts_.n_parallel * (n_draft + 1)) +
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
    threads.attach(ctx_dft_.get());
    seq_rm_dft_ = common_context_can_seq_rm(ctx_dft_.get());
    head_ = head;

    if (opts_.fuse_catch_up && MtpDrafter::applies(head->get(), seq_rm_tgt_, seq_rm_dft_)) {
        drafter_ = std::make_unique<MtpDrafter>(ctx_tgt_.get(), ctx_dft_.get(), opts_.n_parallel, opts_.p_min);
        return;
    }
    spec_params_.types = {COMMON_SPECULATIVE_TYPE_DRAFT_MTP};
    spec_params_.draft.n_max = n_draft;
    spec_params_.draft.n_min = 0;
    spec_params_.draft.p_min = opts_.p_min;
    spec_params_.draft.ctx_tgt = ctx_tgt_.get();
    spec_params_.draft.ctx_dft = ctx_dft_.get();
    spec_.reset(common_speculative_init(spec_params_, (uint32_t) opts_.n_parallel));
    if (!spec_) {
        fail(ErrorKind::MissingMtpHead, with_log("llama.cpp could not initialise draft-mtp speculation"));
    }
}

int32_t Session::n_ctx() const { return (int32_t) llama_n_ctx(ctx_tgt_.get()); }

int32_t Session::n_ctx_slot() const { return (int32_t) llama_n_ctx_seq(ctx_tgt_.get()); }

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

uint64_t Session::cache_bytes() const {
    uint64_t n = 0;
    for (const llama_context * ctx : {ctx_tgt_.get(), ctx_dft_.get()}) {
        if (ctx) {
            for (const auto & [buft, memory] : llama_get_memory_breakdown(ctx)) {
                n += memory.context;
            }
        }
    }
    return n;
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

bool Session::Slot::wants_stop() const {
    if (cancel_requested.load(std::memory_order_relaxed)) {
        return true;
    }
    const int64_t deadline = deadline_us.load(std::memory_order_relaxed);
    return deadline > 0 && now_us() > deadline;
}

bool Session::abort_cb(void * data) {
    // A decode stops only when every generation in it wants to stop: the others need its rows.
    const auto & slots = static_cast<Session *>(data)->round_slots_;
    if (slots.empty()) {
        return false;
    }
    for (const Slot * s : slots) {
        if (!s->wants_stop()) {
            return false;
        }
    }
    return true;
}

void Session::check_deadline(const Slot & s) {
    if (s.cancel_requested.load()) {
        fail(ErrorKind::Cancelled, "generation was cancelled");
    }
    const int64_t deadline = s.deadline_us.load();
    if (deadline > 0 && now_us() > deadline) {
        fail(ErrorKind::Timeout, "generation exceeded its timeout");
    }
}

void Session::decode_or_throw(llama_context * ctx, common_batch & batch, const char * what) {
    const int32_t rc = llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch.get());
    if (rc == 2) {
        fail(ErrorKind::Cancelled, "generation was aborted");  // each slot's own reason: fail_round
    }
    if (rc != 0) {
        fail(ErrorKind::Decode, with_log(std::string("llama.cpp failed to decode the ") + what +
                                         " (code " + std::to_string(rc) + ")"));
    }
}

// A GPU backend returns from llama_decode before it computes, and the first read of the
// outputs waits. Waiting where a phase ends keeps the time in that phase's bucket.
void Session::synchronize_contexts() {
    llama_synchronize(ctx_tgt_.get());
    if (ctx_dft_) {
        llama_synchronize(ctx_dft_.get());
    }
}

void Session::head_failed(int32_t rc, const char * what) {
    if (rc == 2) {
        fail(ErrorKind::Cancelled, "generation was aborted");
    }
    fail(ErrorKind::Decode, with_log(std::string("the MTP head failed to ") + what + " (code " + std::to_string(rc) + ")"));
}

void Session::record(Slot & s, const Counters & c, bool shared_batch_counted) {
    s.call.add(c);
    if (shared_batch_counted && c.verify_batches) {
        Counters t = c;
        t.verify_batches = 0;  // the round's decode is in the session's counters once
        total_.add(t);
        return;
    }
    total_.add(c);
}

Session::Slot & Session::slot_at(int32_t slot) const {
    if (slot < 0 || slot >= (int32_t) slots_.size()) {
        fail(ErrorKind::InvalidOption, "slot " + std::to_string(slot) + " does not exist (the session has " +
                                           std::to_string(slots_.size()) + ")");
    }
    return *slots_[(size_t) slot];
}

Counters Session::call_stats(int32_t slot) const {
    const Slot & s = slot_at(slot < 0 ? last_slot_.load() : slot);
    return s.call.snapshot(s.active_n_draft.load(std::memory_order_relaxed));
}

void Session::cancel() {
    for (auto & s : slots_) {
        s->cancel_requested.store(true);
    }
}

void Session::cancel(int32_t slot) { slot_at(slot).cancel_requested.store(true); }

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

constexpr int32_t kRoundsAhead = 4;

void deliver(StepResult & ready, StepResult && out) {
    for (TokenOut & t : out.tokens) {
        ready.tokens.push_back(std::move(t));
    }
    if (out.finished) {
        ready.finished = true;
        ready.finish_reason = out.finish_reason;
    }
}

}  // namespace

int32_t Session::begin(const std::vector<int32_t> & prompt, const GenerateOptions & g, uint64_t call) {
    check_rpc();
    validate(g, longest_draft(opts_));
    if (prompt.empty()) {
        fail(ErrorKind::InvalidPrompt, "prompt is empty: pass at least one token or a non-empty string");
    }
    target_->check_tokens(prompt);
    const int64_t need = (int64_t) prompt.size() + g.max_tokens;
    if (need > n_ctx_slot()) {
        fail(ErrorKind::ContextOverflow,
             "prompt (" + std::to_string(prompt.size()) + " tokens) plus max_tokens (" + std::to_string(g.max_tokens) +
                 ") exceeds " + (slots_.size() > 1 ? "a slot's context (n_ctx / n_parallel = " : "n_ctx (") +
                 std::to_string(n_ctx_slot()) +
                 "): shorten the prompt, lower max_tokens or create the session with a larger n_ctx");
    }
    const bool has_grammar = g.sampling.grammar && !g.sampling.grammar->empty();
    clear_log();
    common_params_sampling sampling = to_common_params(g.sampling, target_->vocab());
    common_sampler_ptr sampler;
    try {
        sampler.reset(common_sampler_init(target_->get(), sampling));
    } catch (const std::exception & e) {
        fail(has_grammar ? ErrorKind::Grammar : ErrorKind::InvalidOption,
             with_log(std::string("invalid sampling options: ") + e.what()));
    }
    if (!sampler) {
        fail(ErrorKind::Grammar, with_log("the grammar does not parse (GBNF syntax error)"));
    }

    std::lock_guard<std::mutex> lock(mu_);
    Slot & s = pick_slot(prompt);
    s.in_use = true;
    s.call_id = call;
    n_running_.fetch_add(1);
    try {
        s.sampler = std::move(sampler);
        s.preserved_tokens = sampling.preserved_tokens;
        prepare(s, prompt, g);
    } catch (...) {
        s.sampler.reset();
        s.in_use = false;
        n_running_.fetch_sub(1);
        throw;
    }
    last_slot_.store(s.seq);
    return s.seq;
}

// The free slot that holds the longest usable prefix of `prompt`; among equals, the one
// used least recently (its conversation is the least likely to come back).
Session::Slot & Session::pick_slot(const std::vector<int32_t> & prompt) {
    Slot * best = nullptr;
    size_t best_n = 0;
    for (auto & p : slots_) {
        Slot & s = *p;
        if (s.in_use) {
            continue;
        }
        const size_t n = cached_prefix(s, prompt);
        if (!best || n > best_n || (n == best_n && s.last_used < best->last_used)) {
            best = &s;
            best_n = n;
        }
    }
    if (!best) {
        if (slots_.size() == 1) {
            fail(ErrorKind::Busy, "a generation is already running on this session: finish or close it first, "
                                  "or use one session per concurrent generation");
        }
        fail(ErrorKind::Busy, "all " + std::to_string(slots_.size()) + " slots of this session are running "
                              "generations: wait for one to finish, or create the session with a larger n_parallel");
    }
    best->last_used = ++begin_count_;
    return *best;
}

void Session::prepare(Slot & s, const std::vector<int32_t> & prompt, const GenerateOptions & g) {
    s.cancel_requested.store(false);
    // Timeouts beyond ~30 years are treated as none (and cannot overflow).
    const double timeout = g.timeout.value_or(0.0);
    s.deadline_us.store(timeout > 0.0 && timeout < 1e9 ? now_us() + (int64_t) (timeout * 1e6) : 0);
    const DraftLength n_draft = g.n_draft.value_or(opts_.n_draft);
    const bool has_head = spec_ || drafter_;
    s.auto_draft = has_head && is_auto(n_draft);
    s.active_n_draft.store(!has_head ? 0 : s.auto_draft ? longest_draft(opts_) : std::get<int32_t>(n_draft),
                           std::memory_order_relaxed);
    // The head reads the prompt only if it is going to draft soon; otherwise it
    // keeps the last rows for the catch-up of its first draft.
    s.head_defers_prompt = s.auto_draft && controller_.expects_plain() && (drafter_ || head_may_lag());
    s.pending_observation.reset();
    if (n_running_.load() == 1) {
        controller_.interrupt();  // a new call after a pause; with others running, the rounds go on
    }
    s.max_tokens = g.max_tokens;
    s.produced = 0;
    s.text.reset(g.stop);
    s.draft_tokens.clear();
    s.ckpt.clear();
    s.replay_pending = false;
    s.finished = false;
    s.first_token_seen = false;
    s.rounds_ready = 0;
    s.ready = StepResult{};
    s.error = nullptr;

    s.cache_this_call = g.cache_prompt.value_or(opts_.cache_prompt);
    s.head_followed = s.head_follows;  // whether the previous call kept the head in step
    s.head_follows = drafting(s);
    if (s.cache_this_call) {
        pick_saved_state(s, prompt);
    }
    const size_t start = s.cache_this_call ? reuse_prefix(s, prompt) : 0;
    if (start == 0) {
        clear_contexts(s);
    }
    s.cache_valid = false;  // until a step completes
    s.prompt.assign(prompt.begin(), prompt.end() - 1);
    s.prompt_done = start;
    for (size_t i = 0; i < start; ++i) {
        common_sampler_accept(s.sampler.get(), s.prompt[i], false);
    }
    s.id_last = prompt.back();
    s.context_tokens.resize(start);
    s.context_tokens.reserve(n_ctx_slot());
    s.n_past = (int32_t) start;
    s.prompt_phase = true;
    s.call.reset();
    Counters c;
    c.prompt_tokens = prompt.size();
    c.prompt_tokens_cached = s.reused;
    c.generations = 1;
    record(s, c);
    s.t_begin_us = now_us();
}

void Session::clear_contexts(Slot & s) {
    if (slots_.size() == 1) {
        llama_memory_clear(llama_get_memory(ctx_tgt_.get()), true);
        if (ctx_dft_) {
            llama_memory_clear(llama_get_memory(ctx_dft_.get()), true);
        }
    } else {
        llama_memory_seq_rm(llama_get_memory(ctx_tgt_.get()), s.seq, -1, -1);
        if (ctx_dft_) {
            llama_memory_seq_rm(llama_get_memory(ctx_dft_.get()), s.seq, -1, -1);
        }
    }
    if (drafter_) {
        drafter_->reset(s.seq);
    }
    s.reused = 0;
    s.head_stale = false;
}

// Keeps the longest prefix the contexts share with `prompt` (all but its last token,
// which the first verify pass decodes). Returns the position prompt processing starts
// at: the reused length, or one less where the target decodes the last reused token
// again for the hidden state the head pairs with the next row; 0 = nothing reused.
size_t Session::reuse_prefix(Slot & s, const std::vector<int32_t> & prompt) {
    s.reused = 0;
    if (!s.cache_valid) {
        return 0;
    }
    const size_t n = common_prefix(s.context_tokens, prompt, prompt.size() - 1);
    // The target's cache ends exactly where the new prompt continues: nothing to remove,
    // and the last hidden state is the right one (also for recurrent state, which
    // cannot roll back). Otherwise the tail goes, and the fused driver's head needs one
    // token decoded again for the hidden state it pairs with the next row. A recurrent
    // target refuses a partial removal (llama_memory_seq_rm returns false): recompute.
    const bool exact = n > 0 && n == (size_t) s.n_past;
    const size_t start = exact || !drafter_ ? n : n > 1 ? n - 1 : 0;
    if (start == 0 || !llama_memory_seq_rm(llama_get_memory(ctx_tgt_.get()), s.seq, (llama_pos) start, -1)) {
        return 0;
    }
    if (drafter_) {
        // A call that did not draft left the head's carried hidden state behind.
        drafter_->keep_prefix(s.seq, (llama_pos) n, exact && s.head_followed);
    } else if (spec_) {
        forget_upstream_head(s);
    }
    s.reused = start;
    return start;
}

// llama.cpp's driver keeps its own carry-over state, which a reused or restored prefix
// does not match: the head's cache of the sequence goes. One slot: the head starts afresh
// from the target's last batch when it next drafts. Several slots: it reads every slot's
// rows from here on (an empty sequence may start at any position), so it drafts from what
// it has seen since; output is the target's either way.
void Session::forget_upstream_head(Slot & s) {
    llama_memory_seq_rm(llama_get_memory(ctx_dft_.get()), s.seq, -1, -1);
    s.head_stale = head_may_lag();
}

size_t Session::usable_prefix(const llama_tokens & held, const std::vector<int32_t> & prompt) const {
    const size_t n = common_prefix(held, prompt, prompt.size() - 1);
    // Recurrent state cannot roll back: only a prompt that continues all of it counts.
    return target_rolls_back() || n == held.size() ? n : 0;
}

size_t Session::cached_prefix(const Slot & s, const std::vector<int32_t> & prompt) const {
    const bool exact = s.cache_valid && (size_t) s.n_past == s.context_tokens.size();
    return s.cache_valid && (target_rolls_back() || exact) ? usable_prefix(s.context_tokens, prompt) : 0;
}

// Before this call cuts the slot's conversation (a prompt that shares little with it),
// the conversation is saved; a saved state that shares more with the prompt than the
// current one is restored.
void Session::pick_saved_state(Slot & s, const std::vector<int32_t> & prompt) {
    if (opts_.cache_size_mb <= 0.0) {
        return;
    }
    const size_t current = cached_prefix(s, prompt);
    auto best = saved_.end();
    size_t best_n = current;
    for (auto it = saved_.begin(); it != saved_.end(); ++it) {
        if (const size_t n = usable_prefix(it->tokens, prompt); n > best_n) {
            best = it;
            best_n = n;
        }
    }
    const size_t shared = common_prefix(s.context_tokens, prompt, prompt.size());
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
    if (s.cache_valid && !s.context_tokens.empty() && 4 * shared < 3 * s.context_tokens.size()) {
        save_state(s);
    }
    if (!chosen.empty()) {
        restore_state(s, chosen.front());
    }
}

void Session::save_state(Slot & s) {
    if ((size_t) s.n_past != s.context_tokens.size()) {
        // Accepted rows past the last committed token (a call that stopped mid-batch).
        if (!target_rolls_back() ||
            !llama_memory_seq_rm(llama_get_memory(ctx_tgt_.get()), s.seq, (llama_pos) s.context_tokens.size(), -1)) {
            return;
        }
        s.n_past = (int32_t) s.context_tokens.size();
    }
    SavedState st;
    st.tokens = s.context_tokens;
    st.target.resize(llama_state_seq_get_size(ctx_tgt_.get(), s.seq));
    st.target.resize(llama_state_seq_get_data(ctx_tgt_.get(), st.target.data(), st.target.size(), s.seq));
    if (ctx_dft_) {
        st.head.resize(llama_state_seq_get_size(ctx_dft_.get(), s.seq));
        st.head.resize(llama_state_seq_get_data(ctx_dft_.get(), st.head.data(), st.head.size(), s.seq));
    }
    if (drafter_) {
        st.drafter = drafter_->snapshot(s.seq);
    }
    const uint64_t budget = (uint64_t) (opts_.cache_size_mb * 1024.0 * 1024.0);
    if (st.target.empty() || st.bytes() > budget) {
        return;
    }
    // A saved state this one extends is superseded by it, where the target can roll back
    // (a recurrent one keeps the shorter state: a prompt may extend it and not this one).
    for (auto it = saved_.begin(); it != saved_.end();) {
        const bool prefix = target_rolls_back() && it->tokens.size() <= st.tokens.size() &&
                            std::equal(it->tokens.begin(), it->tokens.end(), st.tokens.begin());
        if (prefix) {
            saved_bytes_ -= it->bytes();
            it = saved_.erase(it);
        } else {
            ++it;
        }
    }
    saved_bytes_ += st.bytes();
    saved_.push_front(std::move(st));
    while (saved_bytes_.load() > budget && !saved_.empty()) {
        saved_bytes_ -= saved_.back().bytes();
        saved_.pop_back();
    }
}

void Session::restore_state(Slot & s, const SavedState & state) {
    clear_contexts(s);
    s.cache_valid = false;
    const bool ok = llama_state_seq_set_data(ctx_tgt_.get(), state.target.data(), state.target.size(), s.seq) != 0 &&
                    (!ctx_dft_ || state.head.empty() ||
                     llama_state_seq_set_data(ctx_dft_.get(), state.head.data(), state.head.size(), s.seq) != 0);
    if (!ok) {
        clear_contexts(s);
        return;
    }
    if (drafter_) {
        drafter_->restore(s.seq, state.drafter);
    } else if (spec_) {
        forget_upstream_head(s);
    }
    s.context_tokens = state.tokens;
    s.n_past = (int32_t) s.context_tokens.size();
    s.cache_valid = true;
}

void Session::end_call(uint64_t call) {
    std::lock_guard<std::mutex> lock(mu_);  // one critical section: the slot cannot be reused in between
    for (const auto & s : slots_) {
        if (call != 0 && s->in_use && s->call_id == call) {
            release(*s);
        }
    }
}

void Session::end(int32_t slot) {
    std::lock_guard<std::mutex> lock(mu_);
    release(slot_at(slot));
}

void Session::release(Slot & s) {
    s.call_id = 0;
    s.sampler.reset();
    s.sampler_before.reset();
    s.deadline_us.store(0);
    s.cancel_requested.store(false);
    s.ready = StepResult{};
    s.rounds_ready = 0;
    s.error = nullptr;
    if (s.in_use) {
        s.in_use = false;
        n_running_.fetch_sub(1);
    }
}

void Session::check_rpc() const {
    target_->check_rpc();
    if (draft_model_) {
        draft_model_->check_rpc();
    }
}

StepResult Session::step(int32_t slot) {
    Slot & s = slot_at(slot);
    // A server lost during the step shows as a decode error or as zeroed tensors: both become
    // Error(RpcLost) here, before any token computed from them is returned.
    check_rpc();
    StepResult out;
    try {
        std::unique_lock<std::mutex> lock(mu_);
        if (!s.in_use) {
            fail(ErrorKind::Busy, "no generation is running: call begin() first");
        }
        // Rounds run until one has produced this slot's output; while another caller
        // drives one, this one waits for the lock (it gets its output from that round).
        while (s.rounds_ready == 0 && !s.error && !s.finished) {
            run_round();
        }
        if (s.error) {
            std::exception_ptr e = s.error;
            s.error = nullptr;
            std::rethrow_exception(e);
        }
        if (s.rounds_ready > 0) {
            out = std::move(s.ready);
            s.ready = StepResult{};
            s.rounds_ready = 0;
        } else {
            out.finished = true;
        }
    } catch (const Error &) {
        check_rpc();
        throw;
    }
    check_rpc();
    return out;
}

void Session::fail_slot(Slot & s, std::exception_ptr e) {
    s.error = std::move(e);
    s.cache_valid = false;
}

// A failure shared by the slots of one decode: a slot that asked to stop gets its own
// reason (cancelled or timed out), the others the failure.
void Session::fail_round(std::vector<Slot *> & slots, std::exception_ptr e) {
    for (Slot * s : slots) {
        if (s->wants_stop()) {
            try {
                check_deadline(*s);
            } catch (...) {
                fail_slot(*s, std::current_exception());
                continue;
            }
        }
        fail_slot(*s, e);
    }
    slots.clear();
}

void Session::run_round() {
    ComputeThreads threads(n_threads_, n_threads_batch_);
    threads.attach(ctx_tgt_.get());
    if (ctx_dft_) {
        threads.attach(ctx_dft_.get());
    }
    std::vector<Slot *> & prompting = round_prompting_;
    std::vector<Slot *> & generating = round_generating_;
    prompting.clear();
    generating.clear();
    for (auto & p : slots_) {
        Slot & s = *p;
        // A few rounds ahead of its caller at most: a slow consumer (a callback, a client
        // over the network) keeps its place in the batches, one that stops taking output
        // stops its generation.
        if (!s.in_use || s.finished || s.error || s.rounds_ready >= kRoundsAhead) {
            continue;
        }
        try {
            check_deadline(s);
        } catch (...) {
            fail_slot(s, std::current_exception());
            continue;
        }
        (s.prompt_phase ? prompting : generating).push_back(&s);
    }
    for (Slot * s : prompting) {
        round_slots_.assign(1, s);
        s->cache_valid = false;  // the contexts hold what context_tokens says only after a whole step
        try {
            process_prompt_chunk(*s);
            s->cache_valid = !s->prompt_phase;
            ++s->rounds_ready;
        } catch (...) {
            fail_round(round_slots_, std::current_exception());
        }
    }
    if (!generating.empty()) {
        round_slots_ = generating;
        for (Slot * s : generating) {
            s->cache_valid = false;
        }
        try {
            speculative_iteration(generating);
        } catch (...) {
            fail_round(generating, std::current_exception());
        }
    }
    round_slots_.clear();
}

void Session::process_prompt_chunk(Slot & s) {
    Counters c;
    {
        ScopedTimer timer(c.t_prompt_us);
        const size_t n = std::min(s.prompt.size() - s.prompt_done, (size_t) llama_n_batch(ctx_tgt_.get()));
        if (n > 0) {
            batch_.clear();
            for (size_t i = 0; i < n; ++i) {
                batch_.add(s.prompt[s.prompt_done + i], (llama_pos) (s.prompt_done + i), s.seq, false);
            }
            decode_or_throw(ctx_tgt_.get(), batch_, "prompt");
            if (feeds_head(s)) {
                if (drafter_ && s.head_defers_prompt) {
                    drafter_->defer_prompt(s.seq, batch_);
                } else if (drafter_) {
                    if (const int32_t rc = drafter_->process_prompt(s.seq, batch_); rc != 0) {
                        head_failed(rc, "process the prompt");
                    }
                } else if (s.head_defers_prompt || s.head_stale) {
                    s.head_stale = true;
                } else if (!common_speculative_process(spec_.get(), batch_)) {
                    head_failed(-1, "process the prompt");
                }
            }
            for (size_t i = 0; i < n; ++i) {
                common_sampler_accept(s.sampler.get(), s.prompt[s.prompt_done + i], false);
            }
            synchronize_contexts();  // the chunk's time is the prompt's, on GPU backends too
            s.prompt_done += n;
        }
        if (s.prompt_done == s.prompt.size()) {
            s.context_tokens.assign(s.prompt.begin(), s.prompt.end());
            s.n_past = (int32_t) s.prompt.size();
            if (s.cache_this_call && !target_rolls_back() && opts_.cache_size_mb > 0.0 && !s.prompt.empty()) {
                // Recurrent state cannot roll back to here after generating: a checkpoint
                // where the prompt ends lets the next turn, which extends it, reuse it.
                save_state(s);
            }
            if (spec_ && feeds_head(s) && !s.head_stale) {
                common_speculative_begin(spec_.get(), s.seq, s.context_tokens);
            }
            s.prompt_phase = false;
        }
    }
    record(s, c);
}

// ------------------------------------------------- draft/verify iteration ---
//
// draft -> verify -> accept -> catch up the head -> commit, or, on a partial
// acceptance of a target that cannot roll back in place, restore the checkpoint
// and re-verify the accepted tokens next step (a replay). Every running slot takes
// part: its drafts and verify rows share the head's and the target's decodes, and
// each slot is charged the share of their time that its rows took.

void Session::speculative_iteration(std::vector<Slot *> & slots) {
    const int64_t t_start = now_us();
    for (Slot * s : slots) {
        s->round = Counters{};
        s->is_replay = s->replay_pending;
        s->replay_pending = false;
        s->resumed = false;
    }
    draft(slots);
    verify(slots);
    for (auto it = slots.begin(); it != slots.end();) {
        try {
            accept(**it);
            ++it;
        } catch (...) {
            fail_slot(**it, std::current_exception());
            it = slots.erase(it);
        }
    }
    catch_up_head(slots);
    size_t rows = 0;
    for (Slot * s : slots) {
        rows += s->draft_tokens.size() + 1;
    }
    const int64_t us_all = now_us() - t_start;
    bool first = true;
    for (Slot * s : slots) {
        try {
            finish_iteration(*s, rows ? us_all * (int64_t) (s->draft_tokens.size() + 1) / (int64_t) rows : us_all, !first);
            first = false;
        } catch (...) {
            fail_slot(*s, std::current_exception());
        }
    }
    slots.clear();
}

// One slot's share of the iteration: counters, commit or checkpoint restore, what the
// draft-length controller learns, and the output for its caller. `us`: its share of the time.
void Session::finish_iteration(Slot & sl, int64_t us, bool batch_counted) {
    {
        Counters & c = sl.round;
        const size_t n_draft = sl.draft_tokens.size();
        const size_t n_accepted = sl.ids.size() - 1;
        const bool must_restore = checkpoints_target() && n_accepted < n_draft;
        c.t_total_us = (uint64_t) us;
        c.iters = 1;
        c.verify_batches = 1;
        if (sl.is_replay) {
            c.replays = 1;
        } else {
            c.drafts_generated = n_draft;
            c.drafts_accepted = n_accepted;
            for (size_t i = 0; i < n_draft && i < (size_t) kMaxDraftPositions; ++i) {
                c.drafted_at[i] = 1;
                c.accepted_at[i] = i < n_accepted ? 1 : 0;
            }
        }
        StepResult out;
        if (must_restore) {
            restore_checkpoint(sl);
        } else {
            commit(sl, n_accepted, out);
            if (!sl.is_replay && n_draft == 0) {
                c.tokens_undrafted = c.tokens_emitted;
            }
        }
        if (drafting(sl)) {
            // The controller sees each drafting pass with its replay (the cost of a
            // partial acceptance on a checkpointed target) as one iteration.
            if (!sl.is_replay) {
                sl.pending_observation = Slot::Observation{(int32_t) n_draft, (int32_t) n_accepted, us,
                                                           (int64_t) c.t_draft_us, sl.resumed};
            } else if (sl.pending_observation) {
                sl.pending_observation->us += us;
                sl.pending_observation->head_us += (int64_t) c.t_draft_us;
            }
            if (!must_restore && sl.pending_observation) {
                const Slot::Observation & o = *sl.pending_observation;
                controller_.observe(o.drafted, o.accepted, o.us, o.head_us, o.resumed);
                sl.pending_observation.reset();
            }
        }
        record(sl, c, batch_counted);
        deliver(sl.ready, std::move(out));
        ++sl.rounds_ready;
        sl.cache_valid = true;
    }
}

int32_t Session::draft_room(const Slot & s) const {
    return std::max(0, std::min({n_ctx_slot() - s.n_past - 2, s.max_tokens - s.produced - 1,
                                 s.active_n_draft.load(std::memory_order_relaxed)}));
}

// Proposes up to the chosen number of tokens for each slot with the MTP head
// (checkpointing a target that cannot roll back in place first). A replay drafts nothing.
void Session::draft(std::vector<Slot *> & slots) {
    int32_t auto_room = -1;  // the longest draft any slot on "auto" has room for (-1: none is)
    for (Slot * s : slots) {
        s->n_max = 0;
        if (s->is_replay) {
            continue;  // draft_tokens holds the tokens to verify again
        }
        s->draft_tokens.clear();
        if (drafting(*s)) {
            s->n_max = draft_room(*s);
            auto_room = s->auto_draft ? std::max(auto_room, s->n_max) : auto_room;
        }
    }
    if (auto_room >= 0) {
        const int32_t chosen = controller_.choose(auto_room);
        for (Slot * s : slots) {
            if (s->auto_draft && !s->is_replay) {
                s->n_max = std::min(s->n_max, chosen);
            }
        }
    }
    if (!drafter_) {
        draft_upstream(slots);
        return;
    }
    std::vector<MtpDrafter::Request> & requests = draft_requests_;
    requests.clear();
    for (Slot * s : slots) {
        if (s->n_max > 0) {
            s->resumed = drafter_->pending_rows(s->seq) > (size_t) longest_draft(opts_) + 1;
            requests.push_back({s->seq, s->id_last, s->n_past, s->n_max, &s->draft_tokens});
        }
    }
    if (requests.empty()) {
        return;  // plain decoding this iteration: nothing to draft, checkpoint or roll back
    }
    const int64_t t0 = now_us();
    const int32_t rc = drafter_->draft(requests);
    const uint64_t share = (uint64_t) (now_us() - t0) / requests.size();
    for (Slot * s : slots) {
        if (s->n_max > 0) {
            s->round.t_draft_us += share;
        }
    }
    if (rc != 0) {
        head_failed(rc, "draft");
    }
}

void Session::draft_upstream(std::vector<Slot *> & slots) {
    llama_context * ctx_tgt = ctx_tgt_.get();
    llama_context * ctx_dft = ctx_dft_.get();
    // Checkpoint work is timed apart only where checkpoints exist.
    const bool ckpt_apart = checkpoints_target() || checkpoints_head();
    size_t n_drafting = 0;
    for (Slot * s : slots) {
        if (s->n_max == 0) {
            continue;
        }
        if (s->head_stale) {
            ScopedTimer timer(s->round.t_draft_us);
            resume_upstream_head(*s);
            s->resumed = true;
        }
        {
            ScopedTimer timer(ckpt_apart ? s->round.t_ckpt_us : s->round.t_draft_us);
            s->ckpt.update_pos((int64_t) s->context_tokens.size(),
                               llama_memory_seq_pos_min(llama_get_memory(ctx_tgt), s->seq),
                               llama_memory_seq_pos_max(llama_get_memory(ctx_tgt), s->seq));
            if (checkpoints_head()) {
                s->ckpt.update_dft(ctx_dft, s->seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
            }
        }
        common_speculative_draft_params & dp = common_speculative_get_draft_params(spec_.get(), s->seq);
        dp.drafting = true;
        dp.n_max = s->n_max;
        dp.pos0 = s->n_past;
        dp.id_last = s->id_last;
        dp.prompt = &s->context_tokens;
        dp.result = &s->draft_tokens;
        ++n_drafting;
    }
    if (n_drafting == 0) {
        return;
    }
    const int64_t t0 = now_us();
    common_speculative_draft(spec_.get());
    const uint64_t share = (uint64_t) (now_us() - t0) / n_drafting;
    for (Slot * s : slots) {
        if (s->n_max == 0) {
            continue;
        }
        s->round.t_draft_us += share;
        if ((int32_t) s->draft_tokens.size() > s->n_max) {
            s->draft_tokens.resize(s->n_max);
        }
        ScopedTimer timer(ckpt_apart ? s->round.t_ckpt_us : s->round.t_draft_us);
        if (!s->draft_tokens.empty() && checkpoints_target()) {
            s->ckpt.update_tgt(ctx_tgt, s->seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        }
        if (checkpoints_head()) {
            s->ckpt.load_dft(ctx_dft, s->seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        }
        llama_memory_seq_rm(llama_get_memory(ctx_dft), s->seq, s->ckpt.pos_max + 1, -1);
    }
}

// llama.cpp's driver skipped the head's catch-up while the target decoded alone (one
// slot): its cache has a gap it cannot decode across. Start it afresh from the target's
// last decode (batch_ and its hidden states), so it can draft from here.
void Session::resume_upstream_head(Slot & s) {
    llama_memory_seq_rm(llama_get_memory(ctx_dft_.get()), s.seq, -1, -1);
    if (!common_speculative_process(spec_.get(), batch_)) {
        head_failed(-1, "catch up after plain decoding");
    }
    s.head_stale = false;
}

// Runs the target on [id_last, drafts...] of every slot, in one batch.
void Session::verify(std::vector<Slot *> & slots) {
    batch_.clear();
    for (Slot * s : slots) {
        s->first_row = batch_.size();
        batch_.add(s->id_last, s->n_past, s->seq, true);
        for (size_t i = 0; i < s->draft_tokens.size(); ++i) {
            batch_.add(s->draft_tokens[i], s->n_past + 1 + (llama_pos) i, s->seq, true);
        }
    }
    const int64_t t0 = now_us();
    decode_or_throw(ctx_tgt_.get(), batch_, "verify batch");
    llama_synchronize(ctx_tgt_.get());  // the pass's time is the verify's, on GPU backends too
    const uint64_t us = (uint64_t) (now_us() - t0);
    const uint64_t rows = (uint64_t) batch_.size();
    for (Slot * s : slots) {
        s->round.t_verify_us += us * (s->draft_tokens.size() + 1) / rows;
    }
}

// Samples the target's tokens along the slot's drafts: the accepted drafts plus one
// token of the target's own. `sampler_before` keeps the sampler state for a
// checkpoint restore.
void Session::accept(Slot & s) {
    ScopedTimer timer(s.round.t_sample_us);
    if (checkpoints_target() && !s.draft_tokens.empty()) {
        s.sampler_before.reset(common_sampler_clone(s.sampler.get()));
    }
    sample_rows_.resize(s.draft_tokens.size() + 1);
    for (size_t i = 0; i < sample_rows_.size(); ++i) {
        sample_rows_[i] = s.first_row + (int) i;
    }
    s.ids = common_sampler_sample_and_accept_n(s.sampler.get(), ctx_tgt_.get(), sample_rows_, s.draft_tokens);
}

// The head catches up on [id_last, accepted drafts] only: rows past the first
// rejection would be trimmed from its cache right after.
void Session::catch_up_head(std::vector<Slot *> & slots) {
    auto must_restore = [this](const Slot & s) { return checkpoints_target() && s.ids.size() - 1 < s.draft_tokens.size(); };
    if (drafter_) {
        for (Slot * s : slots) {
            if (drafting(*s) && !must_restore(*s)) {
                ScopedTimer timer(s->round.t_draft_us);
                drafter_->accept(s->seq, batch_, s->first_row, s->ids.size() - 1);  // decoded with the next draft's first step
            }
        }
        return;
    }
    if (!spec_) {
        return;
    }
    if (!head_may_lag()) {
        // llama.cpp's driver reads each row's hidden state by its index in the target's
        // batch: with several slots it catches up on the whole verify batch, and the
        // rejected rows leave the head's cache at commit.
        const int64_t t0 = now_us();
        const bool ok = common_speculative_process(spec_.get(), batch_);
        const uint64_t us = (uint64_t) (now_us() - t0);
        for (Slot * s : slots) {
            s->round.t_draft_us += us * (s->draft_tokens.size() + 1) / (uint64_t) batch_.size();
        }
        if (!ok) {
            head_failed(-1, "process the verify batch");
        }
        return;
    }
    Slot & s = *slots.front();
    if (!drafting(s) || must_restore(s)) {
        return;
    }
    ScopedTimer timer(s.round.t_draft_us);
    if (s.draft_tokens.empty() || s.head_stale) {
        s.head_stale = true;  // caught up only when drafting resumes (resume_upstream_head)
        return;
    }
    const size_t n_accepted = s.ids.size() - 1;
    const common_batch * rows = &batch_;
    if (n_accepted < s.draft_tokens.size()) {
        accepted_batch_.clear();
        for (size_t i = 0; i <= n_accepted; ++i) {
            accepted_batch_.add(batch_.tokens[i].id, batch_.tokens[i].pos[0], s.seq, true);
        }
        rows = &accepted_batch_;
    }
    if (!common_speculative_process(spec_.get(), *rows)) {
        head_failed(-1, "process the verify batch");
    }
}

// Partial acceptance without in-place rollback: back to the checkpoint, and the
// accepted tokens are verified again next step as a replay (not new drafts).
void Session::restore_checkpoint(Slot & s) {
    ScopedTimer timer(s.round.t_ckpt_us);
    llama_context * ctx_dft = ctx_dft_.get();
    s.draft_tokens = std::move(s.ids);
    s.ckpt.load_tgt(ctx_tgt_.get(), s.seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    llama_memory_seq_rm(llama_get_memory(ctx_tgt_.get()), s.seq, s.ckpt.pos_max + 1, -1);
    if (ctx_dft) {
        s.ckpt.load_dft(ctx_dft, s.seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        llama_memory_seq_rm(llama_get_memory(ctx_dft), s.seq, s.ckpt.pos_max + 1, -1);
    }
    s.context_tokens.resize(s.ckpt.n_tokens);
    s.sampler = std::move(s.sampler_before);
    s.n_past = (int32_t) s.context_tokens.size();
    s.replay_pending = true;
}

// Keeps the accepted tokens in both caches, drops the rejected rows, and emits
// the committed tokens.
void Session::commit(Slot & s, size_t n_accepted, StepResult & out) {
    if (spec_ && feeds_head(s) && !s.head_stale) {
        common_speculative_accept(spec_.get(), s.seq, (uint16_t) n_accepted);
    }
    s.n_past += (int32_t) s.ids.size();
    s.draft_tokens.clear();
    llama_memory_seq_rm(llama_get_memory(ctx_tgt_.get()), s.seq, s.n_past, -1);
    if (ctx_dft_) {
        llama_memory_seq_rm(llama_get_memory(ctx_dft_.get()), s.seq, s.n_past, -1);
    }
    const size_t before = out.tokens.size();
    commit_tokens(s, s.ids, out);
    s.round.tokens_emitted = out.tokens.size() - before;
    if (!s.first_token_seen && !out.tokens.empty()) {
        s.first_token_seen = true;
        s.round.t_first_token_us = (uint64_t) (now_us() - s.t_begin_us);
    }
}

void Session::commit_tokens(Slot & s, const std::vector<llama_token> & ids, StepResult & out) {
    for (llama_token id : ids) {
        s.context_tokens.push_back(s.id_last);
        s.id_last = id;
        if (target_->is_eog(id)) {
            out.tokens.push_back({id, ""});
            finish(s, out, "eog");
            return;
        }
        bool stopped = false;
        const bool special = s.preserved_tokens.count(id) > 0;  // chat markup the parser reads
        std::string text = s.text.push(common_token_to_piece(ctx_tgt_.get(), id, special), stopped);
        out.tokens.push_back({id, std::move(text)});
        ++s.produced;
        if (stopped) {
            finish(s, out, "stop");
            return;
        }
        if (s.produced >= s.max_tokens) {
            finish(s, out, "length");
            return;
        }
    }
}

void Session::finish(Slot & s, StepResult & out, const std::string & reason) {
    if (reason != "stop") {
        std::string rest = s.text.flush();
        if (!rest.empty() && !out.tokens.empty()) {
            out.tokens.back().text += rest;
        }
    }
    s.finished = true;
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
