// The bench's JSON type: nlohmann's ordered_json keeps member order, so a manifest's request is
// sent with its keys in the order the file wrote them (question and option order carry meaning).
#pragma once

#include <nlohmann/json.hpp>

namespace clef::bench {

using Json = nlohmann::ordered_json;

}  // namespace clef::bench
