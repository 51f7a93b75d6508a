// YAML text written from a JSON value: what flowrun writes as YAML that is not
// a spec (`flowrun manifest`'s Kubernetes objects). Here because only this
// module includes yaml-cpp.
#pragma once

#include <string>

#include "flowrun/json.h"

namespace flowrun {

// `value` as one YAML document in block style, through yaml-cpp's emitter,
// ending in a newline and without a `---` line: object members in their
// order, integers, floats and booleans as YAML's own, an
// empty array or object as `[]` or `{}`, null as `~`. A string is written plain only when
// every YAML reader takes it back as that string: it starts with a letter,
// '/' or '_', holds only letters, digits and `._/-`, and is none of the words
// YAML 1.1 reads as a boolean or null (`yes`, `On`, `null`, ...), since
// kubectl's reader is YAML 1.1. Every other string is double-quoted (`"8"`,
// `"0400"`, `"1:20"`, `""`, `"a b"`, `"ghcr.io/me/train:1"`).
std::string yaml_text(const Json& value);

}  // namespace flowrun
