#include "drafter.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "draft_grammar.hpp"
#include "llama-ext.h"

namespace mtp {

namespace {

// Rows queued in a plain stretch wait for the next draft (one batched catch-up, in its first
// decode), so a stretch that ends the call plainly costs the head nothing; they are decoded into
// the head early only once they hold kPendingBytes of hidden states (and at least kMinPendingRows
// rows), so the head still keeps every row of the sequence (an attention sink and the prompt included).
constexpr size_t kPendingBytes = (size_t) 8 << 20;
constexpr size_t kMinPendingRows = 64;
// Memory for the target's hidden states kept per sequence (MtpDrafter::Sequence::hidden): every
// position of the context where it fits (SmolLM2: 2.3 KB a position), else the last ones.
constexpr size_t kHiddenBytes = (size_t) 8 << 20;

}  // namespace

MtpDrafter::MtpDrafter(llama_context * target, llama_context * head, int32_t n_seq, float p_min)
    : target_(target), head_(head),
      n_embd_(llama_model_n_embd_out(llama_get_model(head))),
      vocab_(llama_model_get_vocab(llama_get_model(head))),
      n_vocab_(llama_vocab_n_tokens(vocab_)),
      batch_(head),
      p_min_(p_min),
      hidden_rows_((llama_pos) std::max<size_t>(1, std::min<size_t>(llama_n_ctx(target),
                                                                     kHiddenBytes / (sizeof(float) * (size_t) n_embd_)))),
      pending_limit_(std::max(kMinPendingRows, kPendingBytes / (sizeof(float) * (size_t) n_embd_))),
      seqs_((size_t) std::max(1, n_seq)),
      zero_h_((size_t) n_embd_, 0.0f) {
    pads_ = pads_shared_decodes(llama_get_model(head), (int32_t) seqs_.size());
    if (p_min_ > 0.0f) {
        common_params_sampling sp;  // llama.cpp's draft-mtp sampler: top 10, probabilities among them
        sp.top_k = 10;
        sp.samplers = {COMMON_SAMPLER_TYPE_TOP_K};
        confidence_.reset(common_sampler_init(llama_get_model(head_), sp));
    }
    // Both contexts expose the hidden state of every row, indexed by batch
    // position. The head's MTP graphs keep all rows in their nextn output, while
    // masked mode copies only the first n_outputs rows: right for llama.cpp's
    // one-row draft batches, wrong for a fused batch whose output rows are last.
    llama_set_embeddings_nextn(target_, true, /*masked=*/false);
    llama_set_embeddings_nextn(head_, true, /*masked=*/false);
    for (llama_seq_id seq = 0; seq < (llama_seq_id) seqs_.size(); ++seq) {
        reset(seq);
    }
}

bool MtpDrafter::applies(const llama_model * head, common_context_seq_rm_type target_rm,
                         common_context_seq_rm_type head_rm) {
    return llama_model_n_layer_nextn(head) == 1 && target_rm != COMMON_CONTEXT_SEQ_RM_TYPE_FULL &&
           head_rm != COMMON_CONTEXT_SEQ_RM_TYPE_FULL;
}

void MtpDrafter::clear_pending(Sequence & s) {
    s.pending_tokens.clear();
    s.pending_pos.clear();
    s.pending_h.clear();
}

void MtpDrafter::reset(llama_seq_id seq) {
    Sequence & s = seqs_[seq];
    clear_pending(s);
    s.h_last.assign((size_t) n_embd_, 0.0f);
    s.drafted_from = -1;
    s.head_from = 0;
    s.hidden.resize((size_t) hidden_rows_ * n_embd_);
    s.hidden_end = 0;
}

void MtpDrafter::remember(Sequence & s, llama_pos pos, const float * h) {
    std::memcpy(s.hidden.data() + (size_t) (pos % hidden_rows_) * n_embd_, h, sizeof(float) * n_embd_);
    s.hidden_end = pos + 1;
}

bool MtpDrafter::has_hidden(llama_seq_id seq, llama_pos pos) const {
    const Sequence & s = seqs_[seq];
    return pos >= 0 && pos < s.hidden_end && pos >= s.hidden_end - hidden_rows_;
}

MtpDrafter::Snapshot MtpDrafter::snapshot(llama_seq_id seq) const {
    const Sequence & s = seqs_[seq];
    return {s.pending_tokens, s.pending_pos, s.pending_h, s.h_last};
}

void MtpDrafter::restore(llama_seq_id seq, const Snapshot & snap) {
    Sequence & s = seqs_[seq];
    s.pending_tokens = snap.tokens;
    s.pending_pos = snap.pos;
    s.pending_h = snap.h;
    s.h_last = snap.h_last;
    s.hidden_end = 0;
    s.drafted_from = -1;
    s.head_from = 0;
}

bool MtpDrafter::keep_prefix(llama_seq_id seq, llama_pos n, bool h_valid) {
    Sequence & s = seqs_[seq];
    llama_memory_t mem = llama_get_memory(head_);
    while (!s.pending_pos.empty() && s.pending_pos.back() >= n) {
        s.pending_tokens.pop_back();
        s.pending_pos.pop_back();
        s.pending_h.resize(s.pending_h.size() - n_embd_);
    }
    s.drafted_from = -1;
    s.head_from = n;
    const llama_pos head_end = llama_memory_seq_pos_max(mem, seq) + 1;
    const bool covered = llama_memory_seq_pos_min(mem, seq) <= 0 &&
                         (s.pending_pos.empty() ? head_end >= n
                                                : s.pending_pos.front() == head_end && s.pending_pos.back() + 1 == n);
    if (!h_valid) {
        // The target's row n - 1 is never decoded again for it: that would round it differently
        // from the batch it was first decoded in, and output would part from plain decoding.
        // Where it is no longer kept, the head's row n goes without (its drafts there suffer).
        if (has_hidden(seq, n - 1)) {
            std::memcpy(s.h_last.data(), s.hidden.data() + (size_t) ((n - 1) % hidden_rows_) * n_embd_,
                        sizeof(float) * n_embd_);
        } else {
            s.h_last.assign((size_t) n_embd_, 0.0f);
        }
    }
    s.hidden_end = std::min(s.hidden_end, n);
    if (covered && llama_memory_seq_rm(mem, seq, n, -1)) {
        return true;
    }
    llama_memory_seq_rm(mem, seq, -1, -1);
    clear_pending(s);
    return false;
}

float MtpDrafter::draft_probability(int32_t row) {
    common_sampler_reset(confidence_.get());
    common_sampler_sample(confidence_.get(), head_, row, true);
    return common_sampler_get_candidates(confidence_.get(), true)->data[0].p;
}

void MtpDrafter::queue(Sequence & s, llama_token token, llama_pos pos, const float * h) {
    s.pending_tokens.push_back(token);
    s.pending_pos.push_back(pos);
    s.pending_h.insert(s.pending_h.end(), h, h + n_embd_);
}

void MtpDrafter::add_pending(llama_seq_id seq, size_t first, size_t end) {
    const Sequence & s = seqs_[seq];
    for (size_t i = first; i < end; ++i) {
        const int32_t idx = batch_.add(s.pending_tokens[i], s.pending_pos[i], seq, false);
        batch_.set_embd(idx, {s.pending_h.data() + i * n_embd_, 1, (size_t) n_embd_});
    }
}

int32_t MtpDrafter::flush(llama_seq_id seq) {
    Sequence & s = seqs_[seq];
    const size_t n = s.pending_tokens.size();
    const size_t n_batch = (size_t) llama_n_batch(head_);
    for (size_t first = 0; first < n; first += n_batch) {
        batch_.clear();
        add_pending(seq, first, std::min(n, first + n_batch));
        if (const int32_t rc = llama_process(head_, LLAMA_PROCESS_TYPE_DECODE, batch_.get()); rc != 0) {
            return rc;
        }
    }
    clear_pending(s);
    return 0;
}

int32_t MtpDrafter::process_prompt(llama_seq_id seq, const common_batch & target_batch) {
    Sequence & s = seqs_[seq];
    const int32_t n = target_batch.size();
    if (n <= 0) {
        return 0;
    }
    if (const int32_t rc = flush(seq); rc != 0) {  // rows kept from a previous generation: their own decode
        return rc;
    }
    const float * h_target = llama_get_embeddings_nextn(target_);
    for (int32_t k = 0; k < n; ++k) {
        remember(s, target_batch.tokens[k].pos[0], h_target + (size_t) k * n_embd_);
    }
    batch_.clear();
    for (int32_t k = 0; k < n; ++k) {
        if (target_batch.tokens[k].pos[0] < s.head_from) {
            continue;  // the head has this row; its hidden state pairs with the next
        }
        const int32_t idx = batch_.add(target_batch.tokens[k].id, target_batch.tokens[k].pos[0], seq, false);
        const float * h = k == 0 ? s.h_last.data() : h_target + (size_t) (k - 1) * n_embd_;
        batch_.set_embd(idx, {h, 1, (size_t) n_embd_});
    }
    const int32_t rc = batch_.size() > 0 ? llama_process(head_, LLAMA_PROCESS_TYPE_DECODE, batch_.get()) : 0;
    if (rc == 0) {
        std::memcpy(s.h_last.data(), h_target + (size_t) (n - 1) * n_embd_, sizeof(float) * n_embd_);
    }
    return rc;
}

int32_t MtpDrafter::decode_padded() {
    const int32_t rc = llama_process(head_, LLAMA_PROCESS_TYPE_DECODE, batch_.get());
    padding_.drop(head_);
    return rc;
}

int32_t MtpDrafter::draft(const std::vector<Request> & requests) {
    padding_.reset();
    size_t rows = 0;
    for (const Request & r : requests) {
        Sequence & s = seqs_[r.seq];
        s.drafted_from = -1;
        s.row = -1;
        if (r.n_max <= 0) {
            continue;
        }
        rows += s.pending_tokens.size() + 1;
    }
    if (rows > (size_t) llama_n_batch(head_)) {
        // Too many catch-up rows for one decode: each sequence's rows go in their own first.
        for (const Request & r : requests) {
            if (r.n_max <= 0) {
                continue;
            }
            if (const int32_t rc = flush(r.seq); rc != 0) {
                return rc;
            }
        }
    }
    // The first decode: each sequence's queued rows and its (id_last, pos), padded to one pass.
    segments_.clear();
    for (const Request & r : requests) {
        if (pads_ && r.n_max > 0) {
            segments_.emplace_back(r.seq, (int32_t) seqs_[r.seq].pending_tokens.size() + 1);
        }
    }
    int32_t pad_to = DecodePadding::rows_per_sequence(head_, segments_);
    batch_.clear();
    llama_seq_id next_seq = pad_to > 0 ? segments_.front().first : 0;
    for (const Request & r : requests) {
        if (r.n_max <= 0) {
            continue;
        }
        for (; pad_to > 0 && next_seq < r.seq; ++next_seq) {
            padding_.add_idle(head_, batch_, next_seq, pad_to, zero_h_.data(), (size_t) n_embd_);
        }
        next_seq = r.seq + 1;
        Sequence & s = seqs_[r.seq];
        const int32_t n = (int32_t) s.pending_tokens.size() + 1;
        add_pending(r.seq, 0, s.pending_tokens.size());
        s.row = batch_.add(r.id_last, r.pos, r.seq, true);
        batch_.set_embd(s.row, {s.h_last.data(), 1, (size_t) n_embd_});
        if (pad_to > 0) {
            padding_.add(batch_, r.seq, r.pos + 1, pad_to - n, zero_h_.data(), (size_t) n_embd_);
        }
    }
    for (int32_t step = 0; batch_.size() > 0; ++step) {
        const int32_t rc = decode_padded();
        if (rc != 0) {
            return rc;
        }
        if (step == 0) {
            // The catch-up rows and each (id_last, pos) are in the head's cache now.
            for (const Request & r : requests) {
                if (r.n_max > 0) {
                    clear_pending(seqs_[r.seq]);
                    seqs_[r.seq].drafted_from = r.pos;
                }
            }
        }
        bool more = false;
        for (const Request & r : requests) {
            Sequence & s = seqs_[r.seq];
            if (s.row < 0) {
                continue;
            }
            const int32_t row = s.row;
            s.row = -1;
            const float * logits = llama_get_logits_ith(head_, row);
            const llama_token id =
                r.sampling  ? sampler_.sample(logits, nullptr, n_vocab_, n_vocab_, *r.sampling, r.grammar)
                : r.grammar ? r.grammar->best_allowed(logits, n_vocab_)
                            : (llama_token) (std::max_element(logits, logits + n_vocab_) - logits);
            if (id < 0 || (confidence_ && draft_probability(row) < p_min_)) {
                if (r.sampling) {
                    r.sampling->q->pop_back();  // the head's row of a token not drafted
                }
                continue;
            }
            r.out->push_back(id);
            if (r.grammar) {
                if (llama_vocab_is_eog(vocab_, id)) {
                    continue;
                }
                r.grammar->accept(id);
                const size_t room = (size_t) std::max<int32_t>(0, r.room - (int32_t) r.out->size());
                if (const size_t n = r.grammar->append_forced(room, *r.out); n > 0) {
                    *r.n_forced += (int32_t) n;
                    continue;
                }
            }
            if ((int32_t) r.out->size() >= r.n_max) {
                continue;
            }
            const float * h = llama_get_embeddings_nextn_ith(head_, row);
            s.h_step.assign(h, h + n_embd_);
            s.row = -2;  // continues: its row is added below, once the batch is cleared
            more = true;
        }
        batch_.clear();
        if (!more) {
            break;
        }
        // One row for each sequence still drafting; the ones that stopped between them are padded.
        segments_.clear();
        for (const Request & r : requests) {
            if (pads_ && seqs_[r.seq].row == -2) {
                segments_.emplace_back(r.seq, 1);
            }
        }
        pad_to = DecodePadding::rows_per_sequence(head_, segments_);
        next_seq = pad_to > 0 ? segments_.front().first : 0;
        for (const Request & r : requests) {
            Sequence & s = seqs_[r.seq];
            if (s.row == -2) {
                for (; pad_to > 0 && next_seq < r.seq; ++next_seq) {
                    padding_.add_idle(head_, batch_, next_seq, pad_to, zero_h_.data(), (size_t) n_embd_);
                }
                next_seq = r.seq + 1;
                s.row = batch_.add(r.out->back(), r.pos + step + 1, r.seq, true);
                batch_.set_embd(s.row, {s.h_step.data(), 1, (size_t) n_embd_});
            }
        }
    }
    return 0;
}

int32_t MtpDrafter::accept(llama_seq_id seq, const common_batch & verify_batch, int32_t first_row, size_t n_accepted) {
    Sequence & s = seqs_[seq];
    const float * h_target = llama_get_embeddings_nextn(target_);
    const auto & rows = verify_batch.tokens;
    if (s.drafted_from >= 0) {
        // Keep (id_last, pos); the head's later rows paired drafts with its own state.
        llama_memory_seq_rm(llama_get_memory(head_), seq, s.drafted_from + 1, -1);
    } else {
        queue(s, rows[first_row].id, rows[first_row].pos[0], s.h_last.data());
    }
    for (size_t i = 1; i <= n_accepted; ++i) {
        queue(s, rows[first_row + i].id, rows[first_row + i].pos[0], h_target + (first_row + i - 1) * n_embd_);
    }
    for (size_t i = 0; i <= n_accepted; ++i) {
        remember(s, rows[first_row + i].pos[0], h_target + (first_row + i) * n_embd_);
    }
    std::memcpy(s.h_last.data(), h_target + (first_row + n_accepted) * n_embd_, sizeof(float) * n_embd_);
    s.drafted_from = -1;
    return s.pending_tokens.size() >= pending_limit_ ? flush(seq) : 0;
}

llama_token HeadSampler::sample(const float * logits, const llama_token * ids, int32_t n, int32_t n_vocab,
                                const HeadSampling & sampling, DraftGrammar * grammar) {
    // The tokens the target's truncation would keep of the head's logits, most likely first.
    kept_.clear();
    float top = -INFINITY;
    for (int32_t i = 0; i < n; ++i) {
        const llama_token id = ids ? ids[i] : i;
        if (logits[i] > -INFINITY && id >= 0 && id < n_vocab) {  // a trimmed head's other rows are -inf
            kept_.emplace_back(logits[i], id);
            top = std::max(top, logits[i]);
        }
    }
    auto by_logit = [](const auto & a, const auto & b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
    if (grammar) {
        // The target draws among the tokens the grammar allows (TargetDistribution): q is the head's
        // distribution over the allowed ones among its best kGrammarScan, truncated as below. The scan
        // stops where truncation would end anyway (top_k allowed found, or below min_p of the best).
        const size_t m = std::min(kept_.size(), (size_t) kGrammarScan);
        std::partial_sort(kept_.begin(), kept_.begin() + m, kept_.end(), by_logit);
        const float floor_gap = sampling.min_p > 0.0f ? std::log(sampling.min_p) : -INFINITY;
        size_t n_allowed = 0;
        for (size_t k = 0; k < m; ++k) {
            if (n_allowed > 0 && ((sampling.top_k > 0 && n_allowed >= (size_t) sampling.top_k) ||
                                  kept_[k].first < kept_.front().first + floor_gap)) {
                break;
            }
            if (grammar->allows(kept_[k].second)) {
                kept_[n_allowed++] = kept_[k];
            }
        }
        kept_.resize(n_allowed);
        top = kept_.empty() ? -INFINITY : kept_.front().first;
    }
    if (sampling.top_k > 0 && (size_t) sampling.top_k < kept_.size()) {
        std::partial_sort(kept_.begin(), kept_.begin() + sampling.top_k, kept_.end(), by_logit);
        kept_.resize((size_t) sampling.top_k);
    } else if (sampling.top_p < 1.0f || sampling.min_p > 0.0f) {
        std::sort(kept_.begin(), kept_.end(), by_logit);
    }
    if (!kept_.empty() && (sampling.top_p < 1.0f || sampling.min_p > 0.0f)) {
        const double top = kept_.front().first;
        double sum = 0.0;
        for (const auto & [logit, id] : kept_) sum += std::exp((double) logit - top);
        size_t n = kept_.size();
        double cum = 0.0;
        for (size_t k = 0; k < kept_.size(); ++k) {
            const double pk = std::exp((double) kept_[k].first - top) / sum;
            if (k > 0 && sampling.min_p > 0.0f && pk < (double) sampling.min_p * (1.0 / sum)) {
                n = k;
                break;
            }
            cum += pk;
            if (cum >= (double) sampling.top_p && sampling.top_p < 1.0f) {
                n = k + 1;
                break;
            }
        }
        kept_.resize(n);
    }
    sampling.q->add_row();
    if (kept_.empty()) {
        return -1;
    }
    const double inv = 1.0 / (double) sampling.temp;
    double sum = 0.0;
    for (const auto & [logit, id] : kept_) {
        const double w = std::exp(((double) logit - (double) top) * inv);
        sampling.q->add(id, (float) w);
        sum += w;
    }
    DraftDistributions::Cell * const first = sampling.q->last_row_begin();
    DraftDistributions::Cell * const last = sampling.q->last_row_end();
    double u = std::uniform_real_distribution<double>(0.0, sum)(*sampling.rng);
    llama_token chosen = kept_.back().second;
    for (const DraftDistributions::Cell * c = first; c != last; ++c) {
        u -= (double) c->second;
        if (u < 0.0) {
            chosen = c->first;
            break;
        }
    }
    for (DraftDistributions::Cell * c = first; c != last; ++c) {
        c->second = (float) ((double) c->second / sum);
    }
    return chosen;
}

}  // namespace mtp
