// Package wire holds RoCEv2 and InfiniBand wire formats as typed views over byte slices: the base and extended transport headers (BTH, RETH, AETH, DETH, IETH, ImmDt), MADs and the communication manager messages, the rdma_cm private-data header, and the ICRC.
package wire
