// The W3C Server-Timing response header (https://www.w3.org/TR/server-timing/): the server's own
// account of where a request's time went, e.g. `queue;dur=0.012, forward;dur=11.032,
// total;dur=11.456` (durations in milliseconds). The bench subtracts the server's `total` from its
// client clock to see what the network, HTTP and JSON handling cost.
#pragma once

#include <map>
#include <string>

namespace clef::bench {

// Metric name -> its `dur` in milliseconds. Tolerant, never throws: metrics in any order, optional
// whitespace, other parameters (`desc="..."`, quoted commas included) skipped; a metric without a
// finite, non-negative `dur` is left out (the header's "0 by default" would read as a real time),
// garbage is skipped up to the next metric, and the first of a repeated metric name wins.
std::map<std::string, double> parse_server_timing(const std::string& header);

}  // namespace clef::bench
