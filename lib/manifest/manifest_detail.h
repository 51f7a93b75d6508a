// What lib/manifest's two files share (kube_names.cpp, manifest.cpp), and the
// unit tests see (tests/unit/manifest_test.cpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "flowrun/spec.h"
#include "flowrun/util.h"

namespace flowrun::manifest_detail {

// Kubernetes' rules for a name (k8s.io/apimachinery's validation): a
// DNS-1035 label (a Service, and so our every object) is [a-z]([-a-z0-9]*[a-z0-9])?,
// a DNS-1123 label (a namespace) may start with a digit too; both at most 63.
bool is_dns1035_label(std::string_view name);
bool is_dns1123_label(std::string_view name);
// A Kueue LocalQueue's name, held by a label: an object's name (a DNS-1123
// subdomain: lower-case letters, digits, '-' and '.') that a label's value
// can hold (at most 63, starting and ending with a letter or digit).
bool is_queue_name(std::string_view name);

// `text` as a DNS-1035 label of at most `max` characters: lower case, each
// run of other characters one '-', "flow-" before one that does not start
// with a letter, cut, no '-' at the end. `max` is at least 5.
std::string dns1035_slug(std::string_view text, std::size_t max);

// What follows NAME in the host name of the gang's last pod, out of `pods`:
// "-3" for an Indexed Job (`<job>-<index>`), "-node-0-3" for a JobSet
// (`<jobset>-<replicatedJob>-<jobIndex>-<index>`).
std::string host_suffix(bool jobset, int pods);

// Node 0's DNS name in the pods' namespace: `<name>-0.<name>` (the headless
// Service `<name>` is the pods' subdomain), `<name>-node-0-0.<name>` in a
// JobSet (whose network.subdomain is `<name>`).
std::string head_host(const std::string& name, bool jobset);

// The reach of an engine that a spec names outright, which would win over
// the gang the pods make ("starts the agents over ssh"); nullopt for one
// that is the gang's.
std::optional<std::string> reach_outside_gang(Engine engine);

// `text` in single quotes, each byte printable() shows.
inline std::string quote(std::string_view text) { return "'" + printable(text) + "'"; }

}  // namespace flowrun::manifest_detail
