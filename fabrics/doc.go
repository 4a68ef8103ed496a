// Package fabrics holds NVMe over Fabrics as data and interfaces: Fabrics commands (Connect, Property Get/Set, Authentication, Disconnect), Connect data, controller properties (CAP, VS, CC, CSTS), SGL descriptors, the discovery log page, NQN validation, and the transport-neutral queue interfaces the target and initiator use.
package fabrics
