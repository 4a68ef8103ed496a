// Package nvme holds the NVMe base specification as data: submission and completion queue entries (SQE, CQE), opcodes, status codes, Identify structures, log pages and features. It encodes and decodes; it does no I/O.
//
// Fixed-size wire structures are typed views over byte slices in
// little-endian order, named and laid out as NVMe Base 2.0, the NVM Command
// Set 1.0 and Linux include/linux/nvme.h name them: SQE (64 bytes), CQE (16
// bytes), IdentifyController and IdentifyNamespace (4096 bytes), SMARTLog,
// FirmwareSlotLog, EffectsLog, ErrorLogEntry, DSMRange. Each has accessor and
// setter methods; a ParseXxx function checks the length of bytes from the
// network, after which the accessors cannot fail. Command-specific fields are
// read through views embedding an SQE: RWCommand, IdentifyCommand,
// GetLogPageCommand, FeaturesCommand, DSMCommand, AbortCommand.
//
// Variable-length structures decode into Go values and encode back:
// DecodeNSIDList/EncodeNSIDList (Identify CNS 02h), DecodeNSDescriptors/
// EncodeNSDescriptors (CNS 03h), DecodeChangedNSList/EncodeChangedNSList (log
// page 04h) and DecodeANALog/ANALog.AppendBinary (log page 0Ch).
//
// A completion status is a Status, SCT<<8 | SC as Linux's NVME_SC_* values;
// the retry hints (DNR, More, CRD) and the phase tag stay in the CQE. An
// *Error carries a Status as a Go error, so a target can return it from a
// command handler and CQE.SetError turns it into the completion.
package nvme
