// Writes every f32 tensor of three llama.cpp passes to a file: a prompt of N tokens, one decoded token and a 3-row
// verify, as llama.cpp's graph callback (cb_eval) sees them. compare.py tells which tensors two CPU variants (or two
// machines) compute unlike; scripts/check_aarch64.sh --tensors runs it for the arm64 variants against x86's.
// Usage: mtp_tensor_dump CPU_BACKEND.so MODEL.gguf OUT N_PROMPT
// Record: name length (u32), name, op length (u32), op, element count (u64), the f32 elements.
#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

FILE * g_out = nullptr;

void write_bytes(const void * data, size_t size) {
    if (std::fwrite(data, 1, size, g_out) != size) {
        std::perror("mtp_tensor_dump: write");
        std::exit(1);
    }
}

bool on_tensor(ggml_tensor * t, bool ask, void *) {
    if (ask) {
        return true;  // see every node
    }
    if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) {
        return true;
    }
    std::vector<float> values(ggml_nelements(t));
    ggml_backend_tensor_get(t, values.data(), 0, ggml_nbytes(t));
    const std::string name = t->name;
    const std::string op = ggml_op_desc(t);
    const uint32_t name_len = name.size();
    const uint32_t op_len = op.size();
    const uint64_t count = values.size();
    write_bytes(&name_len, 4);
    write_bytes(name.data(), name_len);
    write_bytes(&op_len, 4);
    write_bytes(op.data(), op_len);
    write_bytes(&count, 8);
    write_bytes(values.data(), 4 * count);
    return true;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: mtp_tensor_dump CPU_BACKEND.so MODEL.gguf OUT N_PROMPT\n");
        return 2;
    }
    if (!ggml_backend_load(argv[1])) {
        std::fprintf(stderr, "mtp_tensor_dump: cannot load %s\n", argv[1]);
        return 1;
    }
    g_out = std::fopen(argv[3], "wb");
    if (!g_out) {
        std::perror(argv[3]);
        return 1;
    }
    llama_model * model = llama_model_load_from_file(argv[2], llama_model_default_params());
    if (!model) {
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    cp.cb_eval = on_tensor;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        return 1;
    }
    const int n_prompt = std::atoi(argv[4]);
    std::vector<llama_token> prompt;
    for (int i = 0; i < n_prompt; ++i) {
        prompt.push_back(100 + 37 * i);  // any ids the vocabulary has; the same on every machine
    }
    std::vector<llama_token> one = {555};
    std::vector<llama_token> three = {777, 888, 999};
    int rc = llama_decode(ctx, llama_batch_get_one(prompt.data(), (int32_t) prompt.size()));
    rc = rc ? rc : llama_decode(ctx, llama_batch_get_one(one.data(), 1));
    rc = rc ? rc : llama_decode(ctx, llama_batch_get_one(three.data(), 3));
    std::fclose(g_out);
    llama_free(ctx);
    llama_model_free(model);
    return rc == 0 ? 0 : 1;
}
