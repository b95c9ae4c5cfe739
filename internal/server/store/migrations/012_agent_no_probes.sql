-- An agent that takes no health probes and answers for no VIP (an agent
-- whose data plane is OVN's northbound database): every replica leaves
-- it out when it assigns probes and L2 VIPs.
ALTER TABLE agent_acks ADD COLUMN no_probes BOOLEAN NOT NULL DEFAULT FALSE
