#include "scoring.hpp"

#include <algorithm>
#include <cmath>

#include "common.h"
#include "errors.hpp"
#include "parity.hpp"
#include "runtime.hpp"

namespace mtp {

std::vector<float> score_tokens(const Model & model, const std::vector<int32_t> & tokens, int32_t n_batch,
                                int32_t n_threads) {
    const int32_t T = (int32_t) tokens.size();
    if (T < 2) {
        fail(ErrorKind::InvalidPrompt, "scoring needs at least two tokens (the first has nothing before it)");
    }
    if (n_batch < 1) {
        fail(ErrorKind::InvalidOption, "n_batch must be at least 1");
    }
    model.check_tokens(tokens);
    const llama_context_params cp = one_pass_context_params(T, std::min(T, n_batch), n_threads);
    clear_log();
    llama_context_ptr ctx(llama_init_from_model(model.get(), cp));
    if (!ctx) {
        fail(ErrorKind::ModelLoad, with_log("llama.cpp could not create a context of " + std::to_string(T) +
                                            " tokens to score the text"));
    }
    ComputeThreads threads(cp.n_threads, cp.n_threads_batch);  // ends before the context
    threads.attach(ctx.get());
    const int32_t n_vocab = model.n_vocab();
    std::vector<float> out;
    out.reserve((size_t) T - 1);
    common_batch batch(ctx.get());
    for (int32_t start = 0; start < T - 1; start += (int32_t) cp.n_batch) {
        const int32_t n = std::min((int32_t) cp.n_batch, T - 1 - start);  // the last token predicts nothing
        batch.clear();
        for (int32_t i = 0; i < n; ++i) {
            batch.add(tokens[(size_t) (start + i)], start + i, 0, true);
        }
        if (llama_process(ctx.get(), LLAMA_PROCESS_TYPE_DECODE, batch.get()) != 0) {
            fail(ErrorKind::Decode, with_log("llama.cpp failed to decode the text to score"));
        }
        for (int32_t i = 0; i < n; ++i) {
            const float * logits = llama_get_logits_ith(ctx.get(), i);
            const float top = *std::max_element(logits, logits + n_vocab);
            double sum = 0.0;
            for (int32_t v = 0; v < n_vocab; ++v) sum += std::exp((double) (logits[v] - top));
            out.push_back((float) ((double) (logits[tokens[(size_t) (start + i + 1)]] - top) - std::log(sum)));
        }
    }
    return out;
}

}  // namespace mtp
