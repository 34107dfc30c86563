// Errors the engine throws; the bindings turn each kind into its Python MTPError subclass.
#pragma once

#include <stdexcept>
#include <string>

namespace mtp {

// Error kinds map one-to-one onto the Python MTPError subclasses.
enum class ErrorKind {
    ModelLoad,        // path missing/unreadable, not a GGUF, llama.cpp refused it
    MissingMtpHead,   // no MTP head and no draft model, or loaded with load_mtp=False
    IncompatibleDraft,// sidecar width / vocabulary does not match the target
    ContextOverflow,  // prompt + max_tokens beyond n_ctx
    InvalidPrompt,    // empty prompt, token ids out of range
    InvalidOption,    // option value out of range
    Grammar,          // GBNF grammar did not parse
    Busy,             // a generation is already running on this session
    Timeout,          // generation exceeded its timeout
    Cancelled,        // cancel() was called
    Decode,           // llama.cpp failed while decoding
    ChatTemplate,     // a chat template does not parse or fails to render
    ToolSchema,       // a tool's parameters schema cannot become a grammar
    ChatParse,        // model output does not parse in the template's chat format
    RpcLost,          // a connection to an RPC server of the model was lost
};

struct Error : std::runtime_error {
    ErrorKind kind;
    Error(ErrorKind k, const std::string & msg) : std::runtime_error(msg), kind(k) {}
};

[[noreturn]] inline void fail(ErrorKind kind, const std::string & msg) { throw Error(kind, msg); }

}  // namespace mtp
