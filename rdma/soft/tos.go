package soft

// IP type of service (GRH traffic class).
//
// rxe sends each packet with the IPv4 TOS / IPv6 traffic class of its
// address vector's GRH (rxe_net.c, prepare4/prepare6 take
// av->grh.traffic_class), so it is per QP for RC (the AV given at RTR:
// QPAttr.AH.TrafficClass, which the connection manager fills from
// rdma_cm's RDMA_OPTION_ID_TOS on the active side, Config.TrafficClass
// here, and from the REQ's primary path on the passive side) and per work
// request for UD (SendWR.AH.TrafficClass). ACKs, NAKs and READ responses
// a QP's responder sends use its AV too.
//
// The device's UDP sockets are shared by QPs of different classes, so the
// class travels per datagram: a packet records its QP's class when it is
// committed to a send batch (txBatch.forQP), and sendmmsg carries an
// IP_TOS (IPv6: IPV6_TCLASS) control message on every message whose class
// is not 0; class 0 sends none, the socket's default, so the fast path
// is unchanged. With congestion control on, commit also sets the ECN
// field of the class (congestion.go): ECT on every packet but CNPs, so
// they always carry the control message then. A GSO run never mixes
// classes: one super-datagram has one IP header. Both modes send through UDP sockets, so raw mode (whose raw
// socket only receives) needs nothing else.
//
// The ICRC masks the IPv4 TOS and the IPv6 traffic class and flow label
// (wire.ICRC), so a packet's ICRC does not depend on its class and the
// receiver, which in GSO and IPv6 mode rebuilds the header with class 0,
// verifies it all the same. The device's capture (Config.Pcap) records
// each sent packet with its class.
