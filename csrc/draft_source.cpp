#include "draft_source.hpp"

#include "drafter.hpp"
#include "errors.hpp"
#include "runtime.hpp"

namespace mtp {

std::unique_ptr<DraftSource> make_draft_source(llama_context * target, llama_context * head, Rollback rollback,
                                               const ContextOptions & opts) {
    if (opts.fuse_catch_up && MtpDrafter::applies(llama_get_model(head), rollback.target, rollback.head)) {
        return make_fused_head(target, head, opts);
    }
    return make_upstream_head(target, head, rollback, opts);
}

void head_failed(int32_t rc, const char * what) {
    if (rc == 2) {
        fail(ErrorKind::Cancelled, "generation was aborted");
    }
    fail(ErrorKind::Decode, with_log(std::string("the MTP head failed to ") + what + " (code " + std::to_string(rc) + ")"));
}

}  // namespace mtp
