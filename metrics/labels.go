package metrics

import "strings"

// labelValue makes s a valid label value: client_golang refuses one that
// is not UTF-8 and the collector's whole output is lost for the scrape.
// Names a peer supplies (a host NQN from a Connect) may be any bytes.
func labelValue(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
