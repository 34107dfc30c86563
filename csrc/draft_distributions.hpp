// The head's distribution q of each draft it sampled in a round, kept for verification by rejection:
// one row per sampled draft, each the tokens with q > 0 (the head's truncation keeps few of a
// vocabulary). Rows live in one buffer that keeps its capacity across rounds: nothing is
// allocated per draft once it has grown.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "llama.h"

namespace mtp {

class DraftDistributions {
public:
    using Cell = std::pair<llama_token, float>;

    size_t size() const { return starts_.size(); }
    bool empty() const { return starts_.empty(); }
    void clear() {
        starts_.clear();
        cells_.clear();
    }
    // Starts a row; add() appends to the last row.
    void add_row() { starts_.push_back(cells_.size()); }
    void add(llama_token id, float q) { cells_.emplace_back(id, q); }
    Cell * last_row_begin() { return cells_.data() + starts_.back(); }
    Cell * last_row_end() { return cells_.data() + cells_.size(); }
    void pop_back() {
        cells_.resize(starts_.back());
        starts_.pop_back();
    }
    void resize(size_t rows) {
        if (rows < starts_.size()) {
            cells_.resize(starts_[rows]);
            starts_.resize(rows);
        }
    }
    const Cell * row_begin(size_t i) const { return cells_.data() + starts_[i]; }
    const Cell * row_end(size_t i) const { return cells_.data() + (i + 1 < starts_.size() ? starts_[i + 1] : cells_.size()); }

private:
    std::vector<size_t> starts_;
    std::vector<Cell> cells_;
};

}  // namespace mtp
