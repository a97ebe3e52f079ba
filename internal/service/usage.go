package service

import "time"

// Usage is what one request used of a node's resources, as Gage accounts
// for it (issue 12: CPU, disk, network). A handler may set Response.Used
// to what it used outside its own thread (the child processes it ran, work
// it handed to other goroutines); the node adds it to what it measured.
type Usage struct {
	// CPU is CPU time: the handler thread's (CLOCK_THREAD_CPUTIME_ID) plus
	// what the handler reports (child processes' user+system time).
	CPU time.Duration
	// DiskRead and DiskWrite are bytes, not time: the handler thread's
	// storage I/O from /proc/thread-self/io (read_bytes: bytes fetched from
	// the storage layer, page-cache hits excluded; write_bytes: bytes the
	// thread caused to be sent to storage, counted when dirtied), plus the
	// child processes' block I/O (rusage inblock/oublock, 512-byte blocks).
	// Disk channel time is not available per thread without delay
	// accounting, so the gateway converts bytes to time at a configured
	// bandwidth.
	DiskRead, DiskWrite int64
	// NetIn and NetOut are the request and response message sizes on the
	// wire (protobuf payloads, framing excluded).
	NetIn, NetOut int64
}

// Add returns u+v.
func (u Usage) Add(v Usage) Usage {
	u.CPU += v.CPU
	u.DiskRead += v.DiskRead
	u.DiskWrite += v.DiskWrite
	u.NetIn += v.NetIn
	u.NetOut += v.NetOut
	return u
}

// NodeLoad is a node's own figures over its last accounting cycle: what
// the measured requests used, every subscriber together, and how busy its
// resources were. A gateway estimates the cluster's capacity from them.
type NodeLoad struct {
	// Interval is the accounting cycle the figures cover; zero means the
	// node has not completed one yet.
	Interval time.Duration
	// Used is the sum of the measured requests completed in the cycle.
	Used Usage
	// CPUBusy is the process's CPU time (its own and its children's) in the
	// cycle over Interval times the usable cores: 0..1.
	CPUBusy float64
	// DiskBusy is the busiest block device's utilisation (the io_ticks of
	// /proc/diskstats over Interval, iostat's %util): 0..1, 0 if unknown.
	DiskBusy float64
	// Cores is the number of CPUs the process may use.
	Cores int
}

// CallUsage is what a caller learns about one call's resource use, when
// it asks (the client's WithUsage): the node that served it, what the
// request used there, and that node's last accounting cycle.
type CallUsage struct {
	Node string
	Usage
	Load NodeLoad
}
