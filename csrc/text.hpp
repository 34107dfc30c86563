// Token pieces to text: valid UTF-8 only, stop strings cut out.
#pragma once

#include <string>
#include <vector>

namespace mtp {

// Turns token pieces into valid UTF-8 text, holding back split characters and
// any tail that could begin a stop string.
class TextAssembler {
public:
    void reset(std::vector<std::string> stop);
    // Returns the text that is safe to emit after appending `piece`; sets
    // `stopped` when a stop string completed (the stop string is dropped).
    std::string push(const std::string & piece, bool & stopped);
    std::string flush();  // end of generation: the rest, invalid bytes replaced

private:
    std::vector<std::string> stop_;
    std::string pending_;
};

}  // namespace mtp
