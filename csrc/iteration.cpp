// The phases of a round: a prompt chunk for a slot still reading its prompt, and the
// draft/verify iteration for the others:
//
// draft -> checkpoint -> verify -> sample -> catch up the head -> commit, or, on a
// partial acceptance of a target that cannot roll back in place, restore the checkpoint
// and re-verify the accepted tokens next step (a replay). Every running slot takes part:
// its drafts and verify rows share the head's and the target's decodes, and each slot is
// charged the share of their time that its rows took. The drafts come from the session's
// DraftSource; nothing here depends on which.
#include <algorithm>
#include <cmath>
#include <random>

#include "errors.hpp"
#include "session.hpp"

namespace mtp {

namespace {

// log softmax(logits / temp) at `id`, and the `k` largest entries.
TokenLogprobs token_logprobs(const float * logits, int32_t n_vocab, float temp, llama_token id, int32_t k,
                             std::vector<int32_t> & order) {
    const float inv = 1.0f / temp;
    float top = logits[0];
    for (int32_t i = 1; i < n_vocab; ++i) top = std::max(top, logits[i]);
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp((double) (logits[i] - top) * inv);
    const double lse = (double) top * inv + std::log(sum);
    TokenLogprobs out;
    out.logprob = (float) ((double) logits[id] * inv - lse);
    if (k > 0) {
        k = std::min(k, n_vocab);
        order.resize((size_t) n_vocab);
        for (int32_t i = 0; i < n_vocab; ++i) order[(size_t) i] = i;
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
        for (int32_t i = 0; i < k; ++i) {
            out.top.emplace_back(order[(size_t) i], (float) ((double) logits[order[(size_t) i]] * inv - lse));
        }
    }
    return out;
}

// The sampler's own draw at `row` (plain decoding's), accepted into it.
llama_token draw(common_sampler * sampler, llama_context * ctx, int row) {
    const llama_token id = common_sampler_sample(sampler, ctx, row, false);
    common_sampler_accept(sampler, id, true);
    return id;
}

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

void Session::process_prompt_chunk(Slot & s) {
    Counters c;
    {
        ScopedTimer timer(c.t_prompt_us);
        Slot::Call & call = s.call;
        const size_t n = std::min(call.prompt.size() - call.prompt_done, (size_t) llama_n_batch(ctx_tgt_.get()));
        if (n > 0) {
            batch_.clear();
            for (size_t i = 0; i < n; ++i) {
                batch_.add(call.prompt[call.prompt_done + i], (llama_pos) (call.prompt_done + i), s.seq, false);
            }
            decode_or_throw(ctx_tgt_.get(), batch_, "prompt");
            if (feeds_head(s)) {
                source_->prompt_chunk(s, batch_, call.head_defers_prompt);
            }
            for (size_t i = 0; i < n; ++i) {
                common_sampler_accept(call.sampler.get(), call.prompt[call.prompt_done + i], false);
            }
            synchronize_contexts();  // the chunk's time is the prompt's, on GPU backends too
            call.prompt_done += n;
        }
        if (call.prompt_done == call.prompt.size()) {
            s.cache.tokens.assign(call.prompt.begin(), call.prompt.end());
            s.cache.n_past = (int32_t) call.prompt.size();
            if (call.cache_prompt && !target_rolls_back() && saved_.enabled() && !call.prompt.empty()) {
                // Recurrent state cannot roll back to here after generating: a checkpoint
                // where the prompt ends lets the next turn, which extends it, reuse it.
                save_state(s);
            }
            if (feeds_head(s)) {
                source_->prompt_done(s);
            }
            call.prompt_phase = false;
        }
    }
    record(s, c);
}

void Session::speculative_iteration(std::vector<Slot *> & slots) {
    const int64_t t_start = now_us();
    round_padding_rows_ = 0;
    for (Slot * s : slots) {
        Slot::Round & r = s->round;
        r.counters = Counters{};
        r.is_replay = r.replay_pending;
        r.replay_pending = false;
        r.resumed = false;
    }
    draft(slots);
    verify(slots);
    for (auto it = slots.begin(); it != slots.end();) {
        try {
            sample(**it);
            ++it;
        } catch (...) {
            fail_slot(**it, std::current_exception());
            it = slots.erase(it);
        }
    }
    if (source_) {
        source_->catch_up(slots, batch_);
    }
    size_t rows = 0;
    for (Slot * s : slots) {
        rows += s->round.draft_tokens.size() + 1;
    }
    const int64_t us_all = now_us() - t_start;
    bool first = true;
    round_observations_.clear();
    for (Slot * s : slots) {
        try {
            const int64_t share = (int64_t) (s->round.draft_tokens.size() + 1);
            finish_iteration(*s, rows ? us_all * share / (int64_t) rows : us_all, !first);
            first = false;
        } catch (...) {
            fail_slot(*s, std::current_exception());
        }
    }
    observe_round_cost(slots.size());
    slots.clear();
}

// The controller prices a round by its period (until the next round starts: give_round_cost), and
// only a round whose every stream drafted the same length for it (all on "auto", none forced by a
// grammar, none waiting for a replay): that is the shape its choice applies to.
void Session::observe_round_cost(size_t streams) {
    if (round_is_thread_probe_) {
        controller_.skip_round();
        return;
    }
    if (round_observations_.empty() || round_observations_.size() != streams) {
        return;
    }
    const Slot::Call::Observation & first = round_observations_.front();
    int64_t head_us = 0, compute_us = 0;
    bool resumed = false;
    for (const auto & o : round_observations_) {
        if (o.drafted != first.drafted) {
            return;
        }
        head_us += o.head_us;
        compute_us += o.us;
        resumed = resumed || o.resumed;
    }
    pending_cost_ =
        RoundCost{first.drafted, (int32_t) streams, round_threads_, head_us, compute_us, resumed, round_started_us_};
    if (round_prompted_) {
        give_round_cost(-1);
    }
}

void Session::give_round_cost(int64_t next_round_us) {
    if (!pending_cost_) {
        return;
    }
    const RoundCost c = *pending_cost_;
    pending_cost_.reset();
    const int64_t us = next_round_us < 0 ? 0 : next_round_us - c.started_us;  // 0: no sample, and the next is unsteady
    controller_.observe_round(c.drafted, c.streams, us, c.compute_us, c.head_us, c.resumed, c.threads);
}

// One slot's share of the iteration: counters, commit or checkpoint restore, what the
// draft-length controller learns, and the output for its caller. `us`: its share of the time.
void Session::finish_iteration(Slot & sl, int64_t us, bool batch_counted) {
    Slot::Round & r = sl.round;
    Counters & c = r.counters;
    const size_t n_draft = r.draft_tokens.size();
    const size_t n_accepted = r.ids.size() - 1;
    c.t_total_us = (uint64_t) us;
    c.iters = 1;
    c.verify_batches = 1;
    c.padding_rows = (uint64_t) round_padding_rows_;
    if (r.is_replay) {
        c.replays = 1;
    } else {
        c.drafts_generated = n_draft;
        c.drafts_accepted = n_accepted;
        c.drafts_forced = (uint64_t) r.n_forced;
        const size_t head_drafts = n_draft - (size_t) r.n_forced;  // the forced drafts come last
        c.drafts_forced_accepted = n_accepted > head_drafts ? n_accepted - head_drafts : 0;
        for (size_t i = 0; i < n_draft && i < (size_t) kMaxDraftPositions; ++i) {
            c.drafted_at[i] = 1;
            c.accepted_at[i] = i < n_accepted ? 1 : 0;
        }
    }
    StepResult out;
    if (r.must_restore) {
        restore_checkpoint(sl);
    } else {
        commit(sl, n_accepted, out);
        if (!r.is_replay && n_draft == 0) {
            c.tokens_undrafted = c.tokens_emitted;
        }
    }
    if (drafting(sl)) {
        // The controller sees each drafting pass with its replay (the cost of a partial
        // acceptance on a checkpointed target) as one iteration; it prices the head's
        // drafts, so a pass of forced drafts is not one of its observations.
        auto & pending = sl.call.pending_observation;
        if (!r.is_replay) {
            if (r.n_forced == 0) {
                pending = Slot::Call::Observation{(int32_t) n_draft, (int32_t) n_accepted, us,
                                                  (int64_t) c.t_draft_us, r.resumed};
            }
        } else if (pending) {
            pending->us += us;
            pending->head_us += (int64_t) c.t_draft_us;
        }
        if (!r.must_restore && pending) {
            controller_.observe_acceptance(pending->drafted, pending->accepted);
            round_observations_.push_back(*pending);
            pending.reset();
        }
    }
    record(sl, c, batch_counted);
    deliver(sl.call.ready, std::move(out));
    ++sl.call.rounds_ready;
    sl.cache.valid = true;
}

int32_t Session::draft_room(const Slot & s, int32_t longest) const {
    return std::max(0, std::min({n_ctx_slot() - s.cache.n_past - 2, s.call.max_tokens - s.call.produced - 1, longest}));
}

// Asks the draft source for up to the chosen number of tokens for each slot, then
// checkpoints a target that cannot roll back in place. A replay drafts nothing.
void Session::draft(std::vector<Slot *> & slots) {
    int32_t auto_room = -1;  // the longest draft any slot on "auto" has room for (-1: none is)
    int64_t remaining = 0, queued = 0;  // over the slots on "auto": tokens still to produce, rows the head queued
    for (Slot * s : slots) {
        Slot::Round & r = s->round;
        r.room = 0;
        r.forced_room = 0;
        r.n_max = 0;
        r.n_forced = 0;
        if (r.is_replay) {
            continue;  // draft_tokens holds the tokens to verify again
        }
        r.draft_tokens.clear();
        r.draft_q.clear();
        if (drafting(*s)) {
            const int32_t n_draft = s->call.active_n_draft.load(std::memory_order_relaxed);
            r.room = draft_room(*s, n_draft);
            r.forced_room = draft_room(*s, std::max(n_draft, longest_forced_));
            r.n_max = r.room;
            if (s->call.auto_draft) {
                auto_room = std::max(auto_room, r.n_max);
                remaining += std::max(0, s->call.max_tokens - s->call.produced);
                queued += (int64_t) source_->queued_rows(*s);  // drafting(*s): there is a source
            }
        }
    }
    if (auto_room >= 0) {
        // A caller waiting in begin() joins when this round ends: a plain round lets it in sooner (four
        // callers started together joined one per round, and drafted rounds of 20-45 ms in between
        // delayed the last stream, which decides when the batch ends, by 60-90 ms of a 1.4 s batch).
        const bool joining = joining_.load(std::memory_order_relaxed) > 0;
        const int32_t chosen =
            controller_.choose(joining ? -1 : auto_room, (int32_t) slots.size(), round_threads_, remaining, queued);
        for (Slot * s : slots) {
            if (s->call.auto_draft && !s->round.is_replay) {
                s->round.n_max = std::min(s->round.n_max, chosen);
            }
        }
    }
    if (!source_) {
        return;
    }
    source_->draft(slots, batch_);
    round_padding_rows_ = (int32_t) source_->padding_rows();
    if (checkpoints_target()) {
        checkpoint_targets(slots);
    }
}

void Session::checkpoint_targets(const std::vector<Slot *> & slots) {
    llama_memory_t mem = llama_get_memory(ctx_tgt_.get());
    for (Slot * s : slots) {
        Slot::Round & r = s->round;
        if (r.n_max == 0) {
            continue;
        }
        ScopedTimer timer(r.counters.t_ckpt_us);
        r.ckpt.update_pos((int64_t) s->cache.tokens.size(), llama_memory_seq_pos_min(mem, s->seq),
                          llama_memory_seq_pos_max(mem, s->seq));
        if (!r.draft_tokens.empty()) {
            r.ckpt.update_tgt(ctx_tgt_.get(), s->seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        }
    }
}

// Runs the target on [id_last, drafts...] of every slot, in one batch, padded to one pass
// (padding.hpp) unless the head reads the whole batch; the padding rows leave the cache right after.
void Session::verify(std::vector<Slot *> & slots) {
    round_segments_.clear();
    for (size_t i = 0; pads_verify_ && i < slots.size(); ++i) {
        round_segments_.emplace_back(slots[i]->seq, (int32_t) slots[i]->round.draft_tokens.size() + 1);
    }
    const int32_t pad_to = DecodePadding::rows_per_sequence(ctx_tgt_.get(), round_segments_);
    padding_.reset();
    batch_.clear();
    llama_seq_id next_seq = pad_to > 0 ? slots.front()->seq : 0;
    uint64_t rows = 0;
    for (Slot * s : slots) {
        for (; pad_to > 0 && next_seq < s->seq; ++next_seq) {
            padding_.add_idle(ctx_tgt_.get(), batch_, next_seq, pad_to);
        }
        next_seq = s->seq + 1;
        s->round.first_row = batch_.size();
        batch_.add(s->cache.id_last, s->cache.n_past, s->seq, true);
        for (size_t i = 0; i < s->round.draft_tokens.size(); ++i) {
            batch_.add(s->round.draft_tokens[i], s->cache.n_past + 1 + (llama_pos) i, s->seq, true);
        }
        const int32_t n = (int32_t) s->round.draft_tokens.size() + 1;
        rows += (uint64_t) n;
        if (pad_to > 0) {
            padding_.add(batch_, s->seq, s->cache.n_past + n, pad_to - n);
        }
    }
    round_padding_rows_ += (int32_t) padding_.rows();
    const int64_t t0 = now_us();
    struct DropPadding {
        DecodePadding & padding;
        llama_context * ctx;
        ~DropPadding() { padding.drop(ctx); }
    } drop{padding_, ctx_tgt_.get()};
    decode_or_throw(ctx_tgt_.get(), batch_, "verify batch");
    llama_synchronize(ctx_tgt_.get());  // the pass's time is the verify's, on GPU backends too
    const uint64_t us = (uint64_t) (now_us() - t0);
    threads_.observe((int32_t) batch_.size(), (int64_t) us);
    for (Slot * s : slots) {
        s->round.counters.t_verify_us += us * (s->round.draft_tokens.size() + 1) / rows;
    }
}

// Samples the target's tokens along the slot's drafts: the accepted drafts plus one
// token of the target's own. `sampler_before` keeps the sampler state for a
// checkpoint restore.
void Session::sample(Slot & s) {
    Slot::Round & r = s.round;
    ScopedTimer timer(r.counters.t_sample_us);
    if (checkpoints_target() && !r.draft_tokens.empty()) {
        r.sampler_before.reset(common_sampler_clone(s.call.sampler.get()));
    }
    sample_rows_.resize(r.draft_tokens.size() + 1);
    for (size_t i = 0; i < sample_rows_.size(); ++i) {
        sample_rows_[i] = r.first_row + (int) i;
    }
    if (s.call.draft_temp > 0.0f && r.is_replay) {
        r.ids = replay_decided(s);
    } else if (s.call.draft_temp > 0.0f && !r.draft_tokens.empty()) {
        r.ids = sample_by_rejection(s);
    } else {
        r.ids = common_sampler_sample_and_accept_n(s.call.sampler.get(), ctx_tgt_.get(), sample_rows_, r.draft_tokens);
    }
    r.must_restore = checkpoints_target() && r.ids.size() - 1 < r.draft_tokens.size();
    r.logprobs.clear();
    if (s.call.logprobs) {
        // Row i's logits are what the target sampled ids[i] from, as in plain decoding.
        for (size_t i = 0; i < r.ids.size(); ++i) {
            r.logprobs.push_back(token_logprobs(llama_get_logits_ith(ctx_tgt_.get(), sample_rows_[i]),
                                                target_->n_vocab(), s.call.logprob_temp, r.ids[i],
                                                s.call.top_logprobs, logprob_order_));
        }
    }
}

// Exact speculative sampling (Leviathan et al. 2023, Chen et al. 2023) along drafts the head sampled
// from q (round.draft_q): at each row p is the distribution the target's sampler draws from in plain
// decoding (TargetDistribution: penalties, top-k/p, min-p, temperature, a grammar); the draft x is
// accepted with probability min(1, p(x) / q(x)), else the row's token is drawn from max(0, p - q)
// normalised and the draft ends. A draft without a q row (forced text: q = 1 at x) and the row
// after the last accepted draft take the sampler's own draw, as in plain decoding (a draft equal to
// it is accepted: with probability p(x), which is what rejection gives for q = 1, at a plain draw's
// cost). Each output token so follows p, and a draft is accepted with probability sum(min(p, q)).
std::vector<llama_token> Session::sample_by_rejection(Slot & s) {
    Slot::Round & r = s.round;
    common_sampler * sampler = s.call.sampler.get();
    std::mt19937_64 & rng = s.call.rng;
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::vector<llama_token> ids;
    ids.reserve(r.draft_tokens.size() + 1);
    target_p_.begin(sampler, s.call.has_grammar && !r.draft_q.empty());
    for (size_t i = 0; i < r.draft_tokens.size(); ++i) {
        const llama_token x = r.draft_tokens[i];
        if (i >= r.draft_q.size()) {
            // Forced text (the drafts that follow it are forced too): the sampler's own draw.
            const llama_token id = draw(sampler, ctx_tgt_.get(), sample_rows_[i]);
            target_p_.accept(id);
            ids.push_back(id);
            if (id != x || target_->is_eog(id)) {
                return ids;
            }
            continue;
        }
        const std::vector<std::pair<llama_token, double>> & p = target_p_.at(ctx_tgt_.get(), sample_rows_[i]);
        q_dense_.resize((size_t) target_->n_vocab(), 0.0f);  // zero but for this row's tokens, while it is read
        for (const DraftDistributions::Cell * c = r.draft_q.row_begin(i); c != r.draft_q.row_end(i); ++c) {
            q_dense_[(size_t) c->first] = c->second;
        }
        const float * q = q_dense_.data();
        double px = 0.0;
        for (const auto & [id, pv] : p) {
            if (id == x) {
                px = pv;
                break;
            }
        }
        llama_token id = x;
        if (!(uniform(rng) * (double) q[x] < px)) {
            // Rejected: the residual max(0, p - q).
            double total = 0.0;
            residual_.resize(p.size());
            for (size_t k = 0; k < p.size(); ++k) {
                residual_[k] = std::max(0.0, p[k].second - (double) q[p[k].first]);
                total += residual_[k];
            }
            id = p.empty() ? x : p.front().first;
            if (total > 0.0) {
                double u = uniform(rng) * total;
                for (size_t k = 0; k < p.size(); ++k) {
                    if (residual_[k] > 0.0) {
                        id = p[k].first;
                        u -= residual_[k];
                        if (u < 0.0) {
                            break;
                        }
                    }
                }
            }
        }
        for (const DraftDistributions::Cell * c = r.draft_q.row_begin(i); c != r.draft_q.row_end(i); ++c) {
            q_dense_[(size_t) c->first] = 0.0f;
        }
        common_sampler_accept(sampler, id, true);
        target_p_.accept(id);
        ids.push_back(id);
        if (id != x || target_->is_eog(id)) {
            return ids;  // a rejection, or an accepted end of generation (nothing follows it)
        }
    }
    ids.push_back(draw(sampler, ctx_tgt_.get(), sample_rows_.back()));
    return ids;
}

// A replay after verification by rejection: its tokens were decided by the round it repeats (the
// accepted drafts and the row's draw), so they are taken as they are, then one token is drawn from
// p after them. Sampling them again would compare fresh draws with draws of another procedure.
std::vector<llama_token> Session::replay_decided(Slot & s) {
    Slot::Round & r = s.round;
    common_sampler * sampler = s.call.sampler.get();
    std::vector<llama_token> ids;
    ids.reserve(r.draft_tokens.size() + 1);
    for (const llama_token id : r.draft_tokens) {
        common_sampler_accept(sampler, id, true);
        ids.push_back(id);
        if (target_->is_eog(id)) {
            return ids;
        }
    }
    ids.push_back(draw(sampler, ctx_tgt_.get(), sample_rows_.back()));
    return ids;
}

// Partial acceptance without in-place rollback: back to the checkpoint, and the
// accepted tokens are verified again next step as a replay (not new drafts).
void Session::restore_checkpoint(Slot & s) {
    Slot::Round & r = s.round;
    ScopedTimer timer(r.counters.t_ckpt_us);
    r.draft_tokens = std::move(r.ids);
    r.ckpt.load_tgt(ctx_tgt_.get(), s.seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    llama_memory_seq_rm(llama_get_memory(ctx_tgt_.get()), s.seq, r.ckpt.pos_max + 1, -1);
    if (ctx_dft_) {
        r.ckpt.load_dft(ctx_dft_.get(), s.seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        llama_memory_seq_rm(llama_get_memory(ctx_dft_.get()), s.seq, r.ckpt.pos_max + 1, -1);
    }
    s.cache.tokens.resize(r.ckpt.n_tokens);
    s.call.sampler = std::move(r.sampler_before);
    s.cache.n_past = (int32_t) s.cache.tokens.size();
    r.replay_pending = true;
}

// Keeps the accepted tokens in both caches, drops the rejected rows, and emits
// the committed tokens.
void Session::commit(Slot & s, size_t n_accepted, StepResult & out) {
    if (feeds_head(s)) {
        source_->accept(s, n_accepted);
    }
    s.cache.n_past += (int32_t) s.round.ids.size();
    s.round.draft_tokens.clear();
    llama_memory_seq_rm(llama_get_memory(ctx_tgt_.get()), s.seq, s.cache.n_past, -1);
    if (ctx_dft_) {
        llama_memory_seq_rm(llama_get_memory(ctx_dft_.get()), s.seq, s.cache.n_past, -1);
    }
    const size_t before = out.tokens.size();
    commit_tokens(s, s.round.ids, out);
    s.round.counters.tokens_emitted = out.tokens.size() - before;
    if (!s.call.first_token_seen && !out.tokens.empty()) {
        s.call.first_token_seen = true;
        s.round.counters.t_first_token_us = (uint64_t) (now_us() - s.call.t_begin_us);
    }
}

void Session::commit_tokens(Slot & s, const std::vector<llama_token> & ids, StepResult & out) {
    std::vector<TokenLogprobs> & logprobs = s.round.logprobs;  // this round's, moved out
    for (size_t i = 0; i < ids.size(); ++i) {
        const llama_token id = ids[i];
        std::optional<TokenLogprobs> lp;
        if (i < logprobs.size()) {
            lp = std::move(logprobs[i]);
        }
        s.cache.tokens.push_back(s.cache.id_last);
        s.cache.id_last = id;
        if (target_->is_eog(id)) {
            out.tokens.push_back({id, "", std::move(lp)});
            finish(s, out, "eog");
            return;
        }
        bool stopped = false;
        const bool special = s.call.preserved_tokens.count(id) > 0;  // chat markup the parser reads
        std::string text = s.call.text.push(common_token_to_piece(ctx_tgt_.get(), id, special), stopped);
        out.tokens.push_back({id, std::move(text), std::move(lp)});
        ++s.call.produced;
        if (stopped) {
            finish(s, out, "stop");
            return;
        }
        if (s.call.produced >= s.call.max_tokens) {
            finish(s, out, "length");
            return;
        }
    }
}

void Session::finish(Slot & s, StepResult & out, const std::string & reason) {
    if (reason != "stop") {
        std::string rest = s.call.text.flush();
        if (!rest.empty() && !out.tokens.empty()) {
            out.tokens.back().text += rest;
        }
    }
    s.call.finished = true;
    out.finished = true;
    out.finish_reason = reason;
}

}  // namespace mtp
