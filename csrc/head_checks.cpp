#include "head_checks.hpp"

#include <string>

#include "errors.hpp"

namespace mtp {

namespace {

const Model * check_draft_model(const Model & target, const Model & draft) {
    if (!draft.options().load_mtp) {
        fail(ErrorKind::MissingMtpHead, "draft_model was loaded with load_mtp=False: "
                                        "load it with Model.load(path, load_mtp=True)");
    }
    if (!draft.has_mtp_head()) {
        fail(ErrorKind::MissingMtpHead, "draft_model '" + draft.path() + "' has no MTP head tensors "
                                        "(pass an mtp-*.gguf sidecar or a model with an embedded head)");
    }
    require_mtp_graph(draft);
    if (draft.n_embd() != target.n_embd()) {
        fail(ErrorKind::IncompatibleDraft,
             "draft_model hidden size " + std::to_string(draft.n_embd()) + " does not match the target's " +
                 std::to_string(target.n_embd()) + ": use the sidecar made for this target");
    }
    if (draft.n_vocab() != target.n_vocab()) {
        fail(ErrorKind::IncompatibleDraft,
             "draft_model vocabulary size " + std::to_string(draft.n_vocab()) + " does not match the target's " +
                 std::to_string(target.n_vocab()) + ": use the sidecar made for this target");
    }
    if (draft.architecture() != target.architecture()) {
        fail(ErrorKind::IncompatibleDraft, "draft_model architecture '" + draft.architecture() +
                                               "' does not match the target's '" + target.architecture() + "'");
    }
    return &draft;
}

}  // namespace

const Model * mtp_head_for(const Model & target, const Model * draft) {
    if (draft) {
        return check_draft_model(target, *draft);
    }
    if (target.info().n_nextn == 0) {
        fail(ErrorKind::MissingMtpHead,
             "'" + target.path() + "' has no MTP head: pass draft_model=Model.load('mtp-....gguf') "
             "with its sidecar head, or n_draft=0 for plain decoding");
    }
    require_mtp_graph(target);
    if (!target.info().has_mtp_tensors) {
        fail(ErrorKind::MissingMtpHead,
             "'" + target.path() + "' is a trunk-only model (its MTP head is stored in a separate "
             "mtp-*.gguf file): pass draft_model=Model.load('mtp-....gguf') with its sidecar head, or "
             "n_draft=0 for plain decoding");
    }
    if (!target.options().load_mtp) {
        fail(ErrorKind::MissingMtpHead, "the target was loaded with load_mtp=False, so its MTP head is "
                                        "not in memory: load it with Model.load(path, load_mtp=True) "
                                        "or use n_draft=0");
    }
    return &target;
}

}  // namespace mtp
