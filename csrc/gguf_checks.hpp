// What the engine reads and checks in a GGUF header before llama.cpp sees the file.
//
// Loading a GGUF is loading untrusted input, and llama.cpp's loader and graph builders
// assert (aborting the process) on several malformed values instead of throwing. The
// checks here reject those first; everything else is left to llama.cpp's own errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct gguf_context;
struct ggml_context;

namespace mtp {

// Facts read from the GGUF header before llama.cpp sees the file.
struct GgufInfo {
    std::string architecture;
    int64_t n_embd = 0;
    int64_t n_vocab = 0;
    int64_t n_nextn = 0;        // {arch}.nextn_predict_layers
    int64_t block_count = 0;
    bool has_trunk = false;      // blk.0.attn_norm.weight present
    bool has_mtp_tensors = false;// blk.{trunk}.nextn.eh_proj.weight present
    int64_t n_vocab_draft = 0;   // rows of a trimmed MTP head (the d2t tensor's length); 0: no d2t
};

// Architectures whose graph builder in the pinned llama.cpp has an MTP draft
// graph. Others (glm4, exaone4, ...) may store nextn tensors but cannot draft.
const std::vector<std::string> & mtp_graph_architectures();
bool architecture_has_mtp_graph(const std::string & architecture);
// Of those, the ones whose MTP graph runs exactly one head.
const std::vector<std::string> & single_head_mtp_architectures();

// Architectures whose MTP graphs take a trimmed draft vocabulary (patch 0007: a `d2t` tensor
// and an N-row nextn.shared_head_head).
const std::vector<std::string> & draft_vocab_architectures();

// The GgufInfo of an opened header (``meta``: its tensors' shapes), after the checks;
// throws Error(ModelLoad) naming the bad value.
GgufInfo read_gguf_info(const gguf_context * ctx, const ggml_context * meta, const std::string & path);

// Split GGUFs (<name>-00001-of-0000N.gguf ...): ``split.count`` and ``split.no`` of a
// header (0 when absent), and the checks and tensor facts of a later part, added to the
// first part's ``info`` (the trunk or the MTP head may be stored past the first file).
int64_t split_count(const gguf_context * ctx);
int64_t split_index(const gguf_context * ctx);
void read_split_part(GgufInfo & info, const gguf_context * ctx, const ggml_context * meta, const std::string & path);

}  // namespace mtp
