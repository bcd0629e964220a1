package core

// Operation names used in errors.
const (
	OpAllReduce        = "all-reduce"
	OpAllReduceAsync   = "all-reduce-async"
	OpAllGather        = "all-gather"
	OpReduceScatter    = "reduce-scatter"
	OpBroadcast        = "broadcast"
	OpBarrier          = "barrier"
	OpSend             = "send"
	OpRecv             = "recv"
	OpRecvCommand      = "recv-command"
	OpRegister         = "register-buffer"
	OpDeregister       = "deregister-buffer"
	OpSymmetricAlloc   = "symmetric-alloc"
	OpSymmetricFree    = "symmetric-free"
	OpRegisterWindow   = "register-window"
	OpDeregisterWindow = "deregister-window"
	OpSetAddKernel     = "set-add-kernel"
	OpGroupStart       = "group-start"
	OpGroupEnd         = "group-end"
	OpAttemptReconnect = "attempt-reconnect"
	OpClose            = "close"
	OpSync             = "sync"
	OpSplit            = "split"
	OpInit             = "init"
)
