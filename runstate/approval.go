package runstate

// Application error types of a refused UpdateApproval, which the gateway
// maps to HTTP statuses (404, 409, 403, 422).
const (
	ErrTypeApprovalUnknownStep     = "ApprovalUnknownStep"
	ErrTypeApprovalNotWaiting      = "ApprovalNotWaiting"
	ErrTypeApprovalForbidden       = "ApprovalForbidden"
	ErrTypeApprovalCommentRequired = "ApprovalCommentRequired"
)
