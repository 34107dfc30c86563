#include "text.hpp"

#include <algorithm>

namespace mtp {

namespace {

bool is_valid_utf8_prefix_char(unsigned char c, int & len) {
    if (c < 0x80) { len = 1; return true; }
    if ((c & 0xE0) == 0xC0 && c >= 0xC2) { len = 2; return true; }
    if ((c & 0xF0) == 0xE0) { len = 3; return true; }
    if ((c & 0xF8) == 0xF0 && c <= 0xF4) { len = 4; return true; }
    return false;
}

// Splits `s` into a valid UTF-8 prefix (invalid bytes replaced by U+FFFD) and
// an incomplete tail that may still be completed by later bytes.
std::string take_valid_utf8(std::string & s, bool final_flush) {
    static const char kReplacement[] = "\xEF\xBF\xBD";
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = (unsigned char) s[i];
        int len = 0;
        if (!is_valid_utf8_prefix_char(c, len)) {
            out += kReplacement;
            ++i;
            continue;
        }
        if (i + len > s.size()) {
            // Incomplete: valid so far? Then hold it back (unless flushing).
            bool ok = true;
            for (size_t j = i + 1; j < s.size(); ++j) {
                ok = ok && (((unsigned char) s[j]) & 0xC0) == 0x80;
            }
            if (ok && !final_flush) {
                break;
            }
            out += kReplacement;
            ++i;
            continue;
        }
        bool ok = true;
        for (int j = 1; j < len; ++j) {
            ok = ok && (((unsigned char) s[i + j]) & 0xC0) == 0x80;
        }
        if (!ok) {
            out += kReplacement;
            ++i;
            continue;
        }
        out.append(s, i, len);
        i += len;
    }
    s.erase(0, i);
    return out;
}

}  // namespace

void TextAssembler::reset(std::vector<std::string> stop) {
    stop_ = std::move(stop);
    pending_.clear();
}

std::string TextAssembler::push(const std::string & piece, bool & stopped) {
    stopped = false;
    pending_ += piece;
    for (const auto & s : stop_) {
        const size_t pos = pending_.find(s);
        if (pos != std::string::npos) {
            std::string head = pending_.substr(0, pos);
            pending_.clear();
            stopped = true;
            return take_valid_utf8(head, true);
        }
    }
    // Hold back the longest tail that is a proper prefix of a stop string.
    size_t hold = 0;
    for (const auto & s : stop_) {
        const size_t max_len = std::min(s.size() - 1, pending_.size());
        for (size_t len = max_len; len > hold; --len) {
            if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
                hold = len;
                break;
            }
        }
    }
    std::string ready = pending_.substr(0, pending_.size() - hold);
    std::string out = take_valid_utf8(ready, false);
    pending_.erase(0, pending_.size() - hold - ready.size());
    return out;
}

std::string TextAssembler::flush() {
    std::string out = take_valid_utf8(pending_, true);
    pending_.clear();
    return out;
}

}  // namespace mtp
