package rpc

// JSON-RPC 2.0 and MAP error codes (map-protocol.md §6). The numbers are wire
// facts and must never change.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603

	CodeAuthRequired       = 1000
	CodeAuthFailed         = 1001
	CodeTokenExpired       = 1002
	CodePermissionDenied   = 1003
	CodeInsufficientScope  = 1004 // SDK only
	CodeMethodNotSupported = 1005 // SDK only
	CodeInvalidCredentials = 1006 // SDK only

	CodeAddressNotFound  = 2000
	CodeAgentNotFound    = 2001
	CodeScopeNotFound    = 2002
	CodeDeliveryFailed   = 2003
	CodeAddressAmbiguous = 2004
	CodeAgentExists      = 3000
	CodeStateInvalid     = 3001
	CodeNotResponding    = 3002
	CodeTerminated       = 3003
	CodeSpawnFailed      = 3004
	CodeExhausted        = 4000
	CodeRateLimited      = 4001
	CodeQuotaExceeded    = 4002

	CodeFederationUnavailable    = 5000
	CodeFederationSystemNotFound = 5001
	CodeFederationAuthFailed     = 5002
	CodeFederationRouteRejected  = 5003
	CodeDIDResolutionFailed      = 5004
	CodeDIDProofInvalid          = 5005
	CodeLoopDetected             = 5010 // SDK only
	CodeMaxHopsExceeded          = 5011 // SDK only

	// Extension ranges (manifest numbering). Individual mail codes differ
	// between the manifest and the SDK (map-protocol.md §6), so only the
	// range bounds are named here; the mail extension defines its own.
	CodeMailFirst         = 10000
	CodeMailLast          = 10010
	CodeCredentialsFirst  = 11000
	CodeCredentialsLast   = 11003
	CodeWorkspaceFirst    = 12000
	CodeWorkspaceLast     = 12003
	CodeTrajectoryFirst   = 13000
	CodeTrajectoryLast    = 13004
	CodeTasksFirst        = 14000
	CodeTasksLast         = 14003
	CodeSessionsFirst     = 16000
	CodeSessionsLast      = 16999
	CodeExperimentalFirst = 90000
)

// Error categories (MAPErrorData.category).
const (
	CategoryProtocol   = "protocol"
	CategoryAuth       = "auth"
	CategoryRouting    = "routing"
	CategoryAgent      = "agent"
	CategoryResource   = "resource"
	CategoryFederation = "federation"
	CategoryMail       = "mail"
	CategoryTrajectory = "trajectory"
	CategoryInternal   = "internal"
)

type codeInfo struct {
	category  string
	retryable bool
	message   string // default message when NewError gets ""
}

// codeTable is the §6 table. Codes missing here are classified by range in
// classify.
var codeTable = map[int]codeInfo{
	CodeParseError:     {CategoryProtocol, false, "Parse error"},
	CodeInvalidRequest: {CategoryProtocol, false, "Invalid Request"},
	CodeMethodNotFound: {CategoryProtocol, false, "Method not found"},
	CodeInvalidParams:  {CategoryProtocol, false, "Invalid params"},
	CodeInternal:       {CategoryInternal, false, "Internal error"},

	CodeAuthRequired:       {CategoryAuth, false, "Authentication required"},
	CodeAuthFailed:         {CategoryAuth, false, "Authentication failed"},
	CodeTokenExpired:       {CategoryAuth, true, "Token expired"},
	CodePermissionDenied:   {CategoryAuth, false, "Insufficient permissions"},
	CodeInsufficientScope:  {CategoryAuth, false, "Insufficient scope"},
	CodeMethodNotSupported: {CategoryAuth, false, "Method not supported"},
	CodeInvalidCredentials: {CategoryAuth, false, "Invalid credentials"},

	CodeAddressNotFound:  {CategoryRouting, false, "Address not found"},
	CodeAgentNotFound:    {CategoryRouting, false, "Agent not found"},
	CodeScopeNotFound:    {CategoryRouting, false, "Scope not found"},
	CodeDeliveryFailed:   {CategoryRouting, true, "Delivery failed"},
	CodeAddressAmbiguous: {CategoryRouting, false, "Address ambiguous"},

	CodeAgentExists:   {CategoryAgent, false, "Agent already exists"},
	CodeStateInvalid:  {CategoryAgent, false, "Invalid state transition"},
	CodeNotResponding: {CategoryAgent, true, "Agent not responding"},
	CodeTerminated:    {CategoryAgent, false, "Agent terminated"},
	CodeSpawnFailed:   {CategoryAgent, false, "Spawn failed"},

	CodeExhausted:     {CategoryResource, true, "Resource exhausted"},
	CodeRateLimited:   {CategoryResource, true, "Rate limited"},
	CodeQuotaExceeded: {CategoryResource, false, "Quota exceeded"},

	CodeFederationUnavailable:    {CategoryFederation, true, "Federation unavailable"},
	CodeFederationSystemNotFound: {CategoryFederation, false, "Federated system not found"},
	CodeFederationAuthFailed:     {CategoryFederation, false, "Federation authentication failed"},
	CodeFederationRouteRejected:  {CategoryFederation, false, "Federation route rejected"},
	CodeDIDResolutionFailed:      {CategoryFederation, false, "DID resolution failed"},
	CodeDIDProofInvalid:          {CategoryFederation, false, "DID proof invalid"},
	CodeLoopDetected:             {CategoryFederation, false, "Federation loop detected"},
	CodeMaxHopsExceeded:          {CategoryFederation, false, "Maximum hops exceeded"},
}

// classify returns the category and retryability of code. Unknown codes get a
// category from their range; codes outside every known range are "internal"
// for -32xxx and "" otherwise (the category is optional on the wire, but MAP
// policy is to always fill it, so callers should use known codes).
func classify(code int) codeInfo {
	if ci, ok := codeTable[code]; ok {
		return ci
	}
	switch {
	case code >= -32768 && code <= -32000:
		return codeInfo{CategoryInternal, false, "Server error"}
	case code >= 1000 && code < 2000:
		return codeInfo{CategoryAuth, false, "Authentication error"}
	case code >= 2000 && code < 3000:
		return codeInfo{CategoryRouting, false, "Routing error"}
	case code >= 3000 && code < 4000:
		return codeInfo{CategoryAgent, false, "Agent error"}
	case code >= 4000 && code < 5000:
		return codeInfo{CategoryResource, false, "Resource error"}
	case code >= 5000 && code < 6000:
		return codeInfo{CategoryFederation, false, "Federation error"}
	case code >= CodeMailFirst && code <= CodeMailLast:
		return codeInfo{CategoryMail, false, "Mail error"}
	case code >= CodeTrajectoryFirst && code <= CodeTrajectoryLast:
		return codeInfo{CategoryTrajectory, false, "Trajectory error"}
	case code >= 11000 && code < 17000:
		// credentials, workspace, tasks, sessions: the manifests give no
		// category; "resource" is the closest of the schema's enum.
		return codeInfo{CategoryResource, false, "Extension error"}
	default:
		return codeInfo{CategoryInternal, false, "Error"}
	}
}
