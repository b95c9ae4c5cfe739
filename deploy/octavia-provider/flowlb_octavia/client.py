"""A thin client of flowlb server's Octavia API."""

import requests


class FlowlbError(Exception):
    """flowlb refused a call: its status code and Octavia-style message."""

    def __init__(self, code, message):
        super().__init__('flowlb answered %d: %s' % (code, message))
        self.code = code
        self.message = message


class Client:
    """Calls flowlb's API at url (no /v2 suffix). session is a
    keystoneauth1 Session when flowlb runs with Keystone (its token is
    then the service user's), else None: plain HTTP for flowlb with
    noauth."""

    def __init__(self, url, session=None, timeout=30, ca_file=None):
        self.url = url.rstrip('/')
        self.session = session
        self.timeout = timeout
        self._http = requests.Session() if session is None else None
        # Given with every request: a Session's own verify loses to
        # REQUESTS_CA_BUNDLE in the environment.
        self.verify = ca_file or True

    def call(self, method, path, body=None, ok=(200, 201, 202, 204)):
        url = self.url + '/v2/lbaas' + path
        if self.session is not None:
            resp = self.session.request(url, method, json=body,
                                        raise_exc=False,
                                        timeout=self.timeout)
        else:
            resp = self._http.request(method, url, json=body,
                                      timeout=self.timeout,
                                      verify=self.verify)
        data = None
        if resp.content:
            try:
                data = resp.json()
            except ValueError:
                data = None
        if resp.status_code not in ok:
            msg = resp.text
            if isinstance(data, dict):
                msg = data.get('faultstring') or data.get(
                    'description') or msg
            raise FlowlbError(resp.status_code, msg)
        return data

    def get(self, path):
        """GET path; None if flowlb answers 404."""
        try:
            return self.call('GET', path)
        except FlowlbError as e:
            if e.code == 404:
                return None
            raise
