// Package configfs is the target configuration tree in the shape of the Linux nvmet configfs (subsystems, namespaces, ports, hosts), with validation, loaded from HCL.
package configfs
