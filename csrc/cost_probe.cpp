#include "cost_probe.hpp"

#include <algorithm>
#include <chrono>

#include "common.h"
#include "counters.hpp"
#include "drafter.hpp"
#include "errors.hpp"
#include "llama-cpp.h"
#include "runtime.hpp"
#include "sampling.h"
#include "speculative.h"

namespace mtp {

namespace {

double elapsed_us(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - since).count();
}

CostTiming summarise(std::vector<double> v) {
    CostTiming t;
    if (v.empty()) {
        return t;
    }
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    t.median_us = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    t.min_us = v.front();
    return t;
}

// The probe's llama.cpp state. Declaration order = reverse teardown order: the
// speculation states point at both contexts, the MTP context at the target's.
struct Probe {
    llama_context_ptr ctx_tgt;
    llama_context_ptr ctx_dft;
    std::unique_ptr<ComputeThreads> threads;  // ends (detaching itself) before the contexts
    std::vector<common_speculative_ptr> specs;  // [0]: n_max = n_draft (catch-up); [k]: n_max = k
    std::unique_ptr<MtpDrafter> drafter;        // mtp_llm's fused driver, where it applies
    common_sampler_ptr sampler;
    common_batch batch;
};

void decode(llama_context * ctx, common_batch & batch, const char * what) {
    const int32_t rc = llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch.get());
    if (rc != 0) {
        fail(ErrorKind::Decode, with_log(std::string("cost probe: llama.cpp failed to decode the ") + what +
                                         " (code " + std::to_string(rc) + ")"));
    }
}

const Model * head_of(const std::shared_ptr<Model> & target, const std::shared_ptr<Model> & draft) {
    const Model * head = draft ? draft.get() : target.get();
    if (!head->has_mtp_head() || !head->options().load_mtp) {
        return nullptr;  // only the target's passes are timed
    }
    require_mtp_graph(*head);
    if (head->n_embd() != target->n_embd() || head->n_vocab() != target->n_vocab()) {
        fail(ErrorKind::IncompatibleDraft, "cost probe: the MTP head's width or vocabulary does not match the target's");
    }
    return head;
}

std::vector<llama_token> fill_tokens(const Model & target, int32_t fill) {
    const std::string text =
        "The measurement fills the context with ordinary text so that attention reads a realistic "
        "number of cached positions while the passes are timed. ";
    std::vector<llama_token> one = target.tokenize(text, false, false);
    if (one.empty()) {
        one.push_back(0);
    }
    std::vector<llama_token> out;
    out.reserve((size_t) fill);
    while ((int32_t) out.size() < fill) {
        out.push_back(one[out.size() % one.size()]);
    }
    return out;
}

}  // namespace

CostCurve measure_costs(const std::shared_ptr<Model> & target, const std::shared_ptr<Model> & draft,
                        const ContextOptions & opts, int32_t fill, int32_t reps, int32_t warmup) {
    validate(opts, kMaxDraftPositions);
    if (fill < 1 || reps < 1 || warmup < 0) {
        fail(ErrorKind::InvalidOption, "cost probe: fill and reps must be at least 1, warmup at least 0");
    }
    if (target->is_mtp_sidecar()) {
        fail(ErrorKind::ModelLoad, "cost probe: '" + target->path() + "' is an MTP sidecar: pass the trunk as target");
    }
    const Model * head = head_of(target, draft);
    const int32_t n_draft = std::max(1, longest_draft(opts));
    const int32_t max_rows = n_draft + 1;

    ensure_backend();
    llama_context_params cp = to_context_params(opts);
    cp.n_ctx = (uint32_t) std::max(opts.n_ctx, fill + 2 * max_rows + 8);  // a fused draft reaches fill + 2 n_draft
    cp.n_batch = (uint32_t) std::max(opts.n_batch, max_rows);
    cp.n_ubatch = cp.n_batch;
    const llama_flash_attn_type fa = cp.flash_attn_type;
    cp.n_rs_seq = (uint32_t) max_rows;  // hybrid targets roll back whole verify batches

    Probe p;
    clear_log();
    p.ctx_tgt.reset(llama_init_from_model(target->get(), cp));
    if (!p.ctx_tgt) {
        fail(ErrorKind::ModelLoad, with_log("cost probe: llama.cpp could not create the target context"));
    }
    p.threads = std::make_unique<ComputeThreads>(cp.n_threads, cp.n_threads_batch);
    p.threads->attach(p.ctx_tgt.get());
    const common_context_seq_rm_type rm = common_context_can_seq_rm(p.ctx_tgt.get());
    if (rm == COMMON_CONTEXT_SEQ_RM_TYPE_NO || rm == COMMON_CONTEXT_SEQ_RM_TYPE_FULL) {
        fail(ErrorKind::InvalidOption, "cost probe: this model's cache cannot roll back a batch in place, "
                                       "which the probe needs between repetitions");
    }
    if (head) {
        llama_context_params dp = cp;
        dp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
        dp.ctx_other = p.ctx_tgt.get();
        dp.n_rs_seq = 0;
        p.ctx_dft.reset(llama_init_from_model(head->get(), dp));
        if (!p.ctx_dft) {
            fail(ErrorKind::MissingMtpHead, with_log("cost probe: llama.cpp could not create the MTP context"));
        }
        p.threads->attach(p.ctx_dft.get());
        const common_context_seq_rm_type rm_dft = common_context_can_seq_rm(p.ctx_dft.get());
        // The engine's choice of driver (Session::create_contexts).
        if (MtpDrafter::applies(head->get(), rm, rm_dft)) {
            p.drafter = std::make_unique<MtpDrafter>(p.ctx_tgt.get(), p.ctx_dft.get(), 1, 0.0f);
        }
        for (int32_t k = 0; k <= n_draft; ++k) {
            common_params_speculative sp;
            sp.types = {COMMON_SPECULATIVE_TYPE_DRAFT_MTP};
            sp.draft.n_max = k == 0 ? n_draft : k;
            sp.draft.n_min = 0;
            sp.draft.p_min = 0.0f;
            sp.draft.ctx_tgt = p.ctx_tgt.get();
            sp.draft.ctx_dft = p.ctx_dft.get();
            p.specs.emplace_back(common_speculative_init(sp, 1));
            if (!p.specs.back()) {
                fail(ErrorKind::MissingMtpHead, with_log("cost probe: could not initialise draft-mtp speculation"));
            }
        }
    }
    SamplingOptions greedy;
    greedy.temp = 0.0f;
    common_params_sampling sampling = to_common_params(greedy);
    p.sampler.reset(common_sampler_init(target->get(), sampling));
    p.batch = common_batch(p.ctx_tgt.get());

    // Context: `fill` tokens through the target and (as a prompt is) the head.
    llama_context * tgt = p.ctx_tgt.get();
    llama_context * dft = p.ctx_dft.get();
    const std::vector<llama_token> ctx_tokens = fill_tokens(*target, fill + max_rows + 1);
    const llama_tokens prompt(ctx_tokens.begin(), ctx_tokens.begin() + fill);
    const int32_t n_batch = (int32_t) llama_n_batch(tgt);
    for (int32_t done = 0; done < fill;) {
        const int32_t n = std::min(n_batch, fill - done);
        p.batch.clear();
        for (int32_t i = 0; i < n; ++i) {
            p.batch.add(prompt[done + i], done + i, 0, false);
        }
        decode(tgt, p.batch, "context");
        if (head && !common_speculative_process(p.specs[0].get(), p.batch)) {
            fail(ErrorKind::Decode, with_log("cost probe: the MTP head failed to process the context"));
        }
        done += n;
    }
    if (head) {
        for (auto & spec : p.specs) {
            common_speculative_begin(spec.get(), 0, prompt);
        }
    }
    auto rollback = [&] {
        llama_memory_seq_rm(llama_get_memory(tgt), 0, fill, -1);
        if (dft) {
            llama_memory_seq_rm(llama_get_memory(dft), 0, fill, -1);
        }
    };
    auto verify_batch = [&](int32_t rows) {
        p.batch.clear();
        for (int32_t i = 0; i < rows; ++i) {
            p.batch.add(ctx_tokens[fill + i], fill + i, 0, true);
        }
    };

    std::vector<std::vector<double>> t_target(max_rows), t_catch(head ? max_rows : 0), t_draft(head ? n_draft : 0);
    std::vector<double> t_sample;
    llama_tokens drafted;
    std::vector<std::vector<std::vector<double>>> t_fused(p.drafter ? n_draft : 0);
    for (int32_t k = 1; k <= (int32_t) t_fused.size(); ++k) {
        t_fused[k - 1].resize(k + 1);
    }
    // Each pass is timed in the order the loops run it, so it finds the caches as it would
    // there: plain decoding is one-row passes back to back; an MTP iteration is the verify,
    // the samples, the head's catch-up and the next draft.
    auto timed_target = [&](int32_t rows, bool keep) {
        verify_batch(rows);
        auto t0 = std::chrono::steady_clock::now();
        decode(tgt, p.batch, "timed target batch");
        llama_synchronize(tgt);
        if (keep) t_target[rows - 1].push_back(elapsed_us(t0));
        for (int32_t i = 0; i < rows; ++i) {
            t0 = std::chrono::steady_clock::now();
            common_sampler_sample(p.sampler.get(), tgt, i);
            if (keep) t_sample.push_back(elapsed_us(t0));
        }
    };
    auto timed_catch_up = [&](int32_t rows, bool keep) {
        // p.batch holds the `rows` rows the target just decoded.
        const auto t0 = std::chrono::steady_clock::now();
        if (!common_speculative_process(p.specs[0].get(), p.batch)) {
            fail(ErrorKind::Decode, with_log("cost probe: the MTP head failed to catch up"));
        }
        llama_synchronize(dft);
        if (keep) t_catch[rows - 1].push_back(elapsed_us(t0));
    };
    auto timed_draft = [&](int32_t k, bool keep) {
        drafted.clear();
        common_speculative_draft_params & dp = common_speculative_get_draft_params(p.specs[k].get(), 0);
        dp.drafting = true;
        dp.n_max = k;
        dp.pos0 = fill;
        dp.id_last = ctx_tokens[fill];
        dp.prompt = &prompt;
        dp.result = &drafted;
        const auto t0 = std::chrono::steady_clock::now();
        common_speculative_draft(p.specs[k].get());
        if (keep) t_draft[k - 1].push_back(elapsed_us(t0));
    };
    for (int32_t rep = 0; rep < warmup + reps; ++rep) {
        const bool keep = rep >= warmup;
        timed_target(1, false);  // plain decoding: the pass before is a one-row pass too
        rollback();
        timed_target(1, keep);
        rollback();
        if (!head) {
            for (int32_t r = 2; r <= max_rows; ++r) {
                timed_target(r, keep);
                rollback();
            }
            continue;
        }
        for (int32_t k = 1; k <= n_draft; ++k) {
            // An iteration that accepts all k drafts: verify k+1 rows, catch up on them, draft k.
            timed_target(k + 1, keep);
            timed_catch_up(k + 1, keep);
            rollback();  // the draft starts from `fill` again, with the caches as the loop leaves them
            timed_draft(k, keep);
            rollback();
        }
        // Catch-up after a partial acceptance: the last token and the accepted drafts.
        for (int32_t r = 1; r < max_rows; ++r) {
            verify_batch(r);
            decode(tgt, p.batch, "verify batch");
            timed_catch_up(r, keep);
            rollback();
        }
        // The fused driver: after a draft of k from `fill` and its verify, j drafts accepted,
        // the next draft of k decodes the j accepted rows and the new last token in its
        // first step.
        for (int32_t k = 1; k <= (int32_t) t_fused.size(); ++k) {
            for (int32_t j = 0; j <= k; ++j) {
                p.drafter->reset(0);
                drafted.clear();
                if (p.drafter->draft({{0, ctx_tokens[fill], fill, k, &drafted}}) != 0) {
                    fail(ErrorKind::Decode, with_log("cost probe: the fused MTP driver failed to draft"));
                }
                verify_batch(k + 1);
                decode(tgt, p.batch, "verify batch");
                p.drafter->accept(0, p.batch, 0, (size_t) j);
                drafted.clear();
                const auto t0 = std::chrono::steady_clock::now();
                if (p.drafter->draft({{0, ctx_tokens[fill + j + 1], fill + j + 1, k, &drafted}}) != 0) {
                    fail(ErrorKind::Decode, with_log("cost probe: the fused MTP driver failed to draft"));
                }
                if (keep) t_fused[k - 1][j].push_back(elapsed_us(t0));
                rollback();
            }
        }
    }

    CostCurve c;
    c.fill = fill;
    c.reps = reps;
    c.n_threads = cp.n_threads;
    c.n_threads_batch = cp.n_threads_batch;
    c.flash_attn = fa == LLAMA_FLASH_ATTN_TYPE_ENABLED ? "on" : fa == LLAMA_FLASH_ATTN_TYPE_DISABLED ? "off" : "auto";
    for (auto & v : t_target) c.target_rows.push_back(summarise(std::move(v)));
    c.sample = summarise(std::move(t_sample));
    for (auto & v : t_catch) c.catch_up_rows.push_back(summarise(std::move(v)));
    for (auto & v : t_draft) c.draft_passes.push_back(summarise(std::move(v)));
    for (auto & per_k : t_fused) {
        c.fused.emplace_back();
        for (auto & v : per_k) c.fused.back().push_back(summarise(std::move(v)));
    }
    c.driver = !head ? "none" : p.drafter && opts.fuse_catch_up ? "fused" : "upstream";
    return c;
}

}  // namespace mtp
