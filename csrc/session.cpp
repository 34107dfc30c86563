#include "session.hpp"

#include <algorithm>
#include <thread>

#include "errors.hpp"
#include "head_checks.hpp"
#include "rpc.hpp"
#include "runtime.hpp"

namespace mtp {

// ------------------------------------------------------------- lifetime ---

Session::Session(std::shared_ptr<Model> target, std::shared_ptr<Model> draft, const ContextOptions & opts)
    : target_(std::move(target)), draft_model_(std::move(draft)), opts_(opts), saved_(opts.cache_size_mb),
      controller_(std::clamp(longest_draft(opts), 0, kMaxDraftPositions)) {
    validate(opts_, kMaxDraftPositions);
    check_rpc();
    if (target_->is_mtp_sidecar()) {
        fail(ErrorKind::ModelLoad, "'" + target_->path() + "' is an MTP sidecar (head only, no trunk), not a model: "
                                   "load its trunk model as the target and pass draft_model=Model.load('" +
                                   target_->path() + "')");
    }
    create_contexts(longest_draft(opts_) > 0 ? mtp_head_for(*target_, draft_model_.get()) : nullptr);
    for (int32_t i = 0; i < opts_.n_parallel; ++i) {
        slots_.push_back(std::make_unique<Slot>((llama_seq_id) i));
    }
}

Session::~Session() = default;

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
    threads_ = ThreadController(n_threads_, opts_.adaptive_threads, default_threads(),
                                opts_.adaptive_threads ? other_runnable_threads(3) : 0);
    threads_.set_load_reader([] { return other_runnable_threads(); });
    ComputeThreads threads(n_threads_, n_threads_batch_);  // for the probing decodes below
    clear_log();
    ctx_tgt_.reset(llama_init_from_model(target_->get(), cp));
    if (!ctx_tgt_) {
        fail(ErrorKind::ModelLoad, with_log("llama.cpp could not create the target context (n_ctx=" +
                                            std::to_string(opts_.n_ctx) + "; the model was trained on " +
                                            std::to_string(llama_model_n_ctx_train(target_->get())) +
                                            "): lower n_ctx, whose KV cache must fit in memory"));
    }
    threads.attach(ctx_tgt_.get());
    if ((int32_t) llama_n_batch(ctx_tgt_.get()) < opts_.n_parallel * (n_draft + 1)) {
        fail(ErrorKind::InvalidOption, "the verify batch needs n_parallel * (n_draft + 1) = " +
                                           std::to_string(opts_.n_parallel * (n_draft + 1)) +
                                           " tokens but the context allows " +
                                           std::to_string(llama_n_batch(ctx_tgt_.get())) + ": raise n_ctx or n_batch");
    }
    rollback_.target = common_context_can_seq_rm(ctx_tgt_.get());
    // Recurrent state is kept for n_draft rows only; elsewhere forced drafts may be longer.
    const llama_model * tm = target_->get();
    longest_forced_ = llama_model_is_recurrent(tm) || llama_model_is_hybrid(tm)
                          ? n_draft
                          : std::min(std::max(n_draft, kMaxForcedDrafts),
                                     (int32_t) llama_n_batch(ctx_tgt_.get()) / std::max(1, opts_.n_parallel) - 1);
    batch_ = common_batch(ctx_tgt_.get());
    pads_verify_ = target_rolls_back() && pads_shared_decodes(tm, opts_.n_parallel);
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
    rollback_.head = common_context_can_seq_rm(ctx_dft_.get());
    head_ = head;
    source_ = make_draft_source(ctx_tgt_.get(), ctx_dft_.get(), rollback_, opts_);
    pads_verify_ = pads_verify_ && !source_->reads_every_slot();
}

bool Slot::wants_stop() const {
    if (call.cancel_requested.load(std::memory_order_relaxed)) {
        return true;
    }
    const int64_t deadline = call.deadline_us.load(std::memory_order_relaxed);
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
    if (s.call.cancel_requested.load()) {
        fail(ErrorKind::Cancelled, "generation was cancelled");
    }
    const int64_t deadline = s.call.deadline_us.load();
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

void Session::record(Slot & s, const Counters & c, bool shared_batch_counted) {
    s.call.stats.add(c);
    if (shared_batch_counted && c.verify_batches) {
        Counters t = c;
        t.verify_batches = 0;  // the round's decode is in the session's counters once
        t.padding_rows = 0;
        total_.add(t);
        return;
    }
    total_.add(c);
}

Slot & Session::slot_at(int32_t slot) const {
    if (slot < 0 || slot >= (int32_t) slots_.size()) {
        fail(ErrorKind::InvalidOption, "slot " + std::to_string(slot) + " does not exist (the session has " +
                                           std::to_string(slots_.size()) + ")");
    }
    return *slots_[(size_t) slot];
}

Counters Session::call_stats(int32_t slot) const {
    const Slot & s = slot_at(slot < 0 ? last_slot_.load() : slot);
    return s.call.stats.snapshot(s.call.active_n_draft.load(std::memory_order_relaxed));
}

void Session::cancel() {
    for (auto & s : slots_) {
        s->call.cancel_requested.store(true);
    }
}

void Session::cancel(int32_t slot) { slot_at(slot).call.cancel_requested.store(true); }

void Session::print_stats() const {
    if (source_) {
        source_->print_stats(total_.snapshot(longest_draft(opts_)));
    }
}

// ----------------------------------------------------------- generation ---

namespace {

constexpr int32_t kRoundsAhead = 4;

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
    // The penalties' window is a ring buffer of penalty_last_n tokens: no call holds more than its slot.
    // -1 is the whole context, as in llama.cpp's tools (its sampler reads -1 as 0, penalties off).
    sampling.penalty_last_n = sampling.penalty_last_n < 0 ? n_ctx_slot() : std::min(sampling.penalty_last_n, n_ctx_slot());
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

    const bool cache_prompt = g.cache_prompt.value_or(opts_.cache_prompt);
    joining_.fetch_add(1);  // the round that holds the lock now runs plain, to let this call in sooner
    std::lock_guard<std::mutex> lock(mu_);
    joining_.fetch_sub(1);
    const SlotChoice choice = pick_slot(prompt, cache_prompt);
    Slot & s = *choice.slot;
    s.call.in_use = true;
    s.call.id = call;
    n_running_.fetch_add(1);
    try {
        s.call.sampler = std::move(sampler);
        s.call.has_grammar = has_grammar;
        // Exact speculative sampling wherever the target's distribution is known (TargetDistribution):
        // not under a grammar whose reasoning budget also steers the sampler. Under a grammar the head's
        // argmax is the default: most drafts there are forced text (accepted alike either way), and the
        // target's distribution under a grammar costs more than sampled head drafts gained (structured
        // answers at temperature 0.8 ran 0.88-0.95x; docs/performance.md).
        // (common_sampler_init's condition for giving the sampler a reasoning budget.)
        const bool reasoning_steers = !sampling.reasoning_budget_start.empty() &&
                                      !sampling.reasoning_budget_end.empty() &&
                                      (sampling.grammar_lazy || sampling.reasoning_budget_tokens >= 0 ||
                                       sampling.reasoning_control);
        s.call.draft_temp = source_ && g.sampling.temp > 0.0f && !(has_grammar && reasoning_steers)
                                ? g.draft_temp.value_or(has_grammar ? 0.0f : g.sampling.temp)
                                : 0.0f;
        s.call.draft_top_k = g.sampling.top_k;
        s.call.draft_top_p = g.sampling.top_p;
        s.call.draft_min_p = g.sampling.min_p;
        s.call.rng.seed(common_sampler_get_seed(s.call.sampler.get()) ^ 0x9e3779b97f4a7c15ull);
        s.call.preserved_tokens = sampling.preserved_tokens;
        prepare(s, prompt, g, choice.copy_from);
    } catch (...) {
        s.call.sampler.reset();
        s.call.in_use = false;
        n_running_.fetch_sub(1);
        throw;
    }
    last_slot_.store(s.seq);
    return s.seq;
}

// The free slot that holds the longest usable prefix of `prompt`; among equals, the one
// used least recently (its conversation is the least likely to come back). Where that
// slot holds another conversation the prompt would cut (two conversations that share a
// long system prompt) and a free slot would lose nothing, the prompt goes to the latter
// with a copy of the shared prefix: each conversation keeps its slot.
Session::SlotChoice Session::pick_slot(const std::vector<int32_t> & prompt, bool cache_prompt) {
    Slot * best = nullptr;
    size_t best_n = 0;
    Slot * lossless = nullptr;  // a free slot that holds nothing, or what the prompt continues
    size_t lossless_n = 0;
    for (auto & p : slots_) {
        Slot & s = *p;
        if (s.call.in_use) {
            continue;
        }
        const size_t n = cached_prefix(s, prompt);
        if (!best || n > best_n || (n == best_n && s.call.last_used < best->call.last_used)) {
            best = &s;
            best_n = n;
        }
        const bool loses_nothing = !s.cache.valid || n == s.cache.tokens.size();
        if (loses_nothing && (!lossless || n > lossless_n ||
                              (n == lossless_n && s.call.last_used < lossless->call.last_used))) {
            lossless = &s;
            lossless_n = n;
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
    SlotChoice choice{best, nullptr};
    const bool cuts = best_n > 0 && best_n < best->cache.tokens.size();
    if (cache_prompt && cuts && lossless && lossless != best && target_rolls_back()) {
        choice = {lossless, lossless_n < best_n ? best : nullptr};
    }
    choice.slot->call.last_used = ++begin_count_;
    return choice;
}

void Session::prepare(Slot & s, const std::vector<int32_t> & prompt, const GenerateOptions & g, Slot * copy_from) {
    Slot::Call & c = s.call;
    c.cancel_requested.store(false);
    // Timeouts beyond ~30 years are treated as none (and cannot overflow).
    const double timeout = g.timeout.value_or(0.0);
    c.deadline_us.store(timeout > 0.0 && timeout < 1e9 ? now_us() + (int64_t) (timeout * 1e6) : 0);
    const DraftLength n_draft = g.n_draft.value_or(opts_.n_draft);
    c.auto_draft = source_ && is_auto(n_draft);
    c.active_n_draft.store(!source_ ? 0 : c.auto_draft ? longest_draft(opts_) : std::get<int32_t>(n_draft),
                           std::memory_order_relaxed);
    // The head reads the prompt only if it is going to draft soon; otherwise it
    // keeps the last rows for the catch-up of its first draft.
    c.head_defers_prompt = c.auto_draft && controller_.expects_plain() && source_->may_defer_prompt();
    c.pending_observation.reset();
    give_round_cost(-1);  // the rounds' period until now included a wait for this call
    if (n_running_.load() == 1) {
        controller_.interrupt();  // a new call after a pause; with others running, the rounds go on
    }
    c.max_tokens = g.max_tokens;
    c.produced = 0;
    c.logprobs = g.logprobs || g.top_logprobs > 0;
    c.top_logprobs = g.top_logprobs;
    c.logprob_temp = g.sampling.temp > 0.0f ? g.sampling.temp : 1.0f;
    c.text.reset(g.stop);
    s.round.draft_tokens.clear();
    s.round.ckpt.clear();
    s.round.replay_pending = false;
    c.finished = false;
    c.first_token_seen = false;
    c.rounds_ready = 0;
    c.ready = StepResult{};
    c.error = nullptr;

    c.cache_prompt = g.cache_prompt.value_or(opts_.cache_prompt);
    c.head_followed = c.head_follows;  // whether the previous call kept the head in step
    c.head_follows = drafting(s);
    if (c.cache_prompt) {
        if (copy_from) {
            copy_state(*copy_from, s);
        }
        pick_saved_state(s, prompt);
    }
    const size_t start = c.cache_prompt ? reuse_prefix(s, prompt) : 0;
    if (start == 0) {
        clear_contexts(s);
    }
    s.cache.valid = false;  // until a step completes
    c.prompt.assign(prompt.begin(), prompt.end() - 1);
    c.prompt_done = start;
    for (size_t i = 0; i < start; ++i) {
        common_sampler_accept(c.sampler.get(), c.prompt[i], false);
    }
    s.cache.id_last = prompt.back();
    s.cache.tokens.resize(start);
    s.cache.tokens.reserve(n_ctx_slot());
    s.cache.n_past = (int32_t) start;
    c.prompt_phase = true;
    c.stats.reset();
    Counters counted;
    counted.prompt_tokens = prompt.size();
    counted.prompt_tokens_cached = s.cache.reused;
    counted.generations = 1;
    record(s, counted);
    c.t_begin_us = now_us();
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
    if (source_) {
        source_->reset(s);
    }
    s.cache.reused = 0;
}

void Session::end_call(uint64_t call) {
    std::lock_guard<std::mutex> lock(mu_);  // one critical section: the slot cannot be reused in between
    for (const auto & s : slots_) {
        if (call != 0 && s->call.in_use && s->call.id == call) {
            release(*s);
        }
    }
}

void Session::end(int32_t slot) {
    std::lock_guard<std::mutex> lock(mu_);
    release(slot_at(slot));
}

void Session::release(Slot & s) {
    s.call.id = 0;
    s.call.sampler.reset();
    s.round.sampler_before.reset();
    s.call.deadline_us.store(0);
    s.call.cancel_requested.store(false);
    s.call.ready = StepResult{};
    s.call.rounds_ready = 0;
    s.call.error = nullptr;
    if (s.call.in_use) {
        s.call.in_use = false;
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
        // A caller waiting in begin() takes the lock before this caller's next round: std::mutex is not
        // fair, and a caller that re-locks at once could run its whole generation before the other joins.
        for (int spins = 0; joining_.load(std::memory_order_relaxed) > 0 && spins < 1000; ++spins) {
            std::this_thread::yield();
        }
        std::unique_lock<std::mutex> lock(mu_);
        if (!s.call.in_use) {
            fail(ErrorKind::Busy, "no generation is running: call begin() first");
        }
        // A call that times out or is cancelled while a server answers nothing gives up on it
        // after rpc_timeout seconds more (the model then reports the server lost).
        const Model & remote = target_->uses_rpc() || !draft_model_ ? *target_ : *draft_model_;
        RpcStopScope rpc_stop(remote.uses_rpc(), &Session::abort_cb, this, remote.options().rpc_timeout);
        // Rounds run until one has produced this slot's output; while another caller
        // drives one, this one waits for the lock (it gets its output from that round).
        while (s.call.rounds_ready == 0 && !s.call.error && !s.call.finished) {
            run_round();
        }
        if (s.call.error) {
            std::exception_ptr e = s.call.error;
            s.call.error = nullptr;
            std::rethrow_exception(e);
        }
        if (s.call.rounds_ready > 0) {
            out = std::move(s.call.ready);
            s.call.ready = StepResult{};
            s.call.rounds_ready = 0;
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
    s.call.error = std::move(e);
    s.cache.valid = false;
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

void Session::use_threads(int32_t n, int32_t n_batch) {
    if (n == threads_set_ && n_batch == threads_batch_set_) {
        return;
    }
    threads_set_ = n;
    threads_batch_set_ = n_batch;
    llama_set_n_threads(ctx_tgt_.get(), n, n_batch);
    if (ctx_dft_) {
        llama_set_n_threads(ctx_dft_.get(), n, n_batch);
    }
}

void Session::run_round() {
    round_started_us_ = now_us();
    give_round_cost(round_started_us_);
    std::vector<Slot *> & prompting = round_prompting_;
    std::vector<Slot *> & generating = round_generating_;
    prompting.clear();
    generating.clear();
    for (auto & p : slots_) {
        Slot & s = *p;
        // A few rounds ahead of its caller at most: a slow consumer (a callback, a client
        // over the network) keeps its place in the batches, one that stops taking output
        // stops its generation.
        if (!s.call.in_use || s.call.finished || s.call.error || s.call.rounds_ready >= kRoundsAhead) {
            continue;
        }
        try {
            check_deadline(s);
        } catch (...) {
            fail_slot(s, std::current_exception());
            continue;
        }
        (s.call.prompt_phase ? prompting : generating).push_back(&s);
    }
    // The round's thread count (all of them unless the machine is busy), from a pool of
    // exactly that size: a larger pool's idle workers would spin beside the busy decode.
    round_prompted_ = !prompting.empty();
    const int32_t n = generating.empty() ? threads_.current() : threads_.choose();
    const int32_t n_batch = n == n_threads_ ? n_threads_batch_ : n;
    // A probe round (a thread count tried once) is no steady sample of its count's costs.
    round_is_thread_probe_ = n != threads_.current();
    round_threads_ = n;
    ComputeThreads threads(n, n_batch);
    threads.attach(ctx_tgt_.get());
    if (ctx_dft_) {
        threads.attach(ctx_dft_.get());
    }
    use_threads(n, n_batch);
    for (Slot * s : prompting) {
        round_slots_.assign(1, s);
        s->cache.valid = false;  // the contexts hold what cache.tokens says only after a whole step
        try {
            process_prompt_chunk(*s);
            s->cache.valid = !s->call.prompt_phase;
            ++s->call.rounds_ready;
        } catch (...) {
            fail_round(round_slots_, std::current_exception());
        }
    }
    if (!generating.empty()) {
        round_slots_ = generating;
        for (Slot * s : generating) {
            s->cache.valid = false;
        }
        try {
            speculative_iteration(generating);
        } catch (...) {
            fail_round(generating, std::current_exception());
        }
    }
    round_slots_.clear();
}
}  // namespace mtp
