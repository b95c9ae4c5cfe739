-- Each node name is bound to the identity last issued for it (the hash of
-- its public key and of the CA's, its expiry in Unix microseconds): the
-- bootstrap token cannot enroll a bound name again while that identity is
-- valid, and only that identity (or the one before it, whose renewal's
-- answer may have been lost) renews it. A forgotten name keeps a row with
-- empty keys, so that its old identity cannot renew it either.
CREATE TABLE node_identities (
	node TEXT PRIMARY KEY,
	public_key TEXT NOT NULL,
	previous_key TEXT NOT NULL,
	ca_key TEXT NOT NULL,
	not_after BIGINT NOT NULL,
	issued_at BIGINT NOT NULL
)
