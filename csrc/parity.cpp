#include "parity.hpp"

#include <algorithm>

#include "common.h"
#include "llama-ext.h"
#include "errors.hpp"
#include "runtime.hpp"

namespace mtp {

llama_context_params one_pass_context_params(int32_t n_tokens, int32_t n_batch, int32_t n_threads) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) std::max(n_tokens, 16);
    cp.n_batch = cp.n_ubatch = (uint32_t) std::max(1, n_batch);
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = n_threads > 0 ? n_threads : default_threads();
    cp.no_perf = true;
    return cp;
}

ForwardResult forward_with_head(const Model & target, const Model & head, const std::vector<int32_t> & tokens,
                                int32_t n_threads) {
    if (tokens.empty()) {
        fail(ErrorKind::InvalidPrompt, "forward_with_head needs at least one token");
    }
    target.check_tokens(tokens);
    if (!head.has_mtp_head() || !head.options().load_mtp) {
        fail(ErrorKind::MissingMtpHead, "the head model has no loaded MTP head (load it with load_mtp=True)");
    }
    require_mtp_graph(head);
    if (head.n_embd() != target.n_embd() || head.n_vocab() != target.n_vocab()) {
        fail(ErrorKind::IncompatibleDraft, "the head model does not match the target's width or vocabulary");
    }
    const int32_t T = (int32_t) tokens.size();
    const llama_context_params cp = one_pass_context_params(T, std::max(T, 16), n_threads);
    clear_log();
    llama_context_ptr tgt(llama_init_from_model(target.get(), cp));
    if (!tgt) {
        fail(ErrorKind::ModelLoad, with_log("llama.cpp could not create the target context"));
    }
    llama_context_params dp = cp;
    dp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    dp.ctx_other = tgt.get();
    llama_context_ptr dft(llama_init_from_model(head.get(), dp));
    if (!dft) {
        fail(ErrorKind::MissingMtpHead, with_log("llama.cpp could not create the MTP context"));
    }
    ComputeThreads threads(cp.n_threads, cp.n_threads_batch);  // ends before the contexts
    threads.attach(tgt.get());
    threads.attach(dft.get());
    llama_set_embeddings_nextn(tgt.get(), true, false);
    llama_set_embeddings_nextn(dft.get(), true, true);

    ForwardResult r;
    r.n_tokens = T;
    r.n_vocab = target.n_vocab();
    r.n_embd = llama_model_n_embd_out(target.get());
    common_batch batch(tgt.get());
    for (int32_t i = 0; i < T; ++i) {
        batch.add(tokens[i], i, 0, true);
    }
    if (llama_process(tgt.get(), LLAMA_PROCESS_TYPE_DECODE, batch.get()) != 0) {
        fail(ErrorKind::Decode, with_log("llama.cpp failed to decode the tokens"));
    }
    for (int32_t i = 0; i < T; ++i) {
        const float * l = llama_get_logits_ith(tgt.get(), i);
        r.trunk_logits.insert(r.trunk_logits.end(), l, l + r.n_vocab);
        const float * h = llama_get_embeddings_nextn_ith(tgt.get(), i);
        r.trunk_hidden.insert(r.trunk_hidden.end(), h, h + r.n_embd);
    }
    // The head pairs token i with the target's hidden state at i-1 (zeros for i = 0),
    // exactly as draft-mtp's process() does.
    const std::vector<float> zeros(r.n_embd, 0.0f);
    common_batch head_batch(dft.get());
    for (int32_t i = 0; i < T; ++i) {
        const int32_t idx = head_batch.add(tokens[i], i, 0, true);
        const float * h = i == 0 ? zeros.data() : r.trunk_hidden.data() + (size_t) (i - 1) * r.n_embd;
        head_batch.set_embd(idx, {h, 1, (size_t) r.n_embd});
    }
    if (llama_process(dft.get(), LLAMA_PROCESS_TYPE_DECODE, head_batch.get()) != 0) {
        fail(ErrorKind::Decode, with_log("llama.cpp failed to run the MTP head"));
    }
    for (int32_t i = 0; i < T; ++i) {
        const float * l = llama_get_logits_ith(dft.get(), i);
        r.head_logits.insert(r.head_logits.end(), l, l + r.n_vocab);
        const float * h = llama_get_embeddings_nextn_ith(dft.get(), i);
        r.head_hidden.insert(r.head_hidden.end(), h, h + r.n_embd);
    }
    return r;
}

std::vector<std::vector<float>> trunk_hidden_states(const Model & target,
                                                    const std::vector<std::vector<int32_t>> & sequences,
                                                    int32_t n_threads) {
    int32_t longest = 0;
    for (const auto & tokens : sequences) {
        if (tokens.empty()) {
            fail(ErrorKind::InvalidPrompt, "trunk_hidden_states needs at least one token per sequence");
        }
        target.check_tokens(tokens);
        longest = std::max(longest, (int32_t) tokens.size());
    }
    std::vector<std::vector<float>> out;
    if (sequences.empty()) {
        return out;
    }
    const llama_context_params cp = one_pass_context_params(longest, std::max(longest, 16), n_threads);
    clear_log();
    llama_context_ptr ctx(llama_init_from_model(target.get(), cp));
    if (!ctx) {
        fail(ErrorKind::ModelLoad, with_log("llama.cpp could not create the target context"));
    }
    ComputeThreads threads(cp.n_threads, cp.n_threads_batch);  // ends before the context
    threads.attach(ctx.get());
    llama_set_embeddings_nextn(ctx.get(), true, false);
    const size_t n_embd = (size_t) llama_model_n_embd_out(target.get());
    common_batch batch(ctx.get());
    for (const auto & tokens : sequences) {
        llama_memory_clear(llama_get_memory(ctx.get()), true);
        batch.clear();
        const int32_t T = (int32_t) tokens.size();
        for (int32_t i = 0; i < T; ++i) {
            batch.add(tokens[i], i, 0, i == T - 1);
        }
        if (llama_process(ctx.get(), LLAMA_PROCESS_TYPE_DECODE, batch.get()) != 0) {
            fail(ErrorKind::Decode, with_log("llama.cpp failed to decode the tokens"));
        }
        const float * h = llama_get_embeddings_nextn(ctx.get());
        out.emplace_back(h, h + (size_t) T * n_embd);
    }
    return out;
}

}  // namespace mtp
